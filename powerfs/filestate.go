package main

// A file's state in the forgetting layer: its undo log (the bytes of every block changed since its
// last sync, saved before the change), the ranges changed, and its size at the last sync.

import (
	"fmt"
	"sort"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

type span struct{ Start, End int64 }

// MarshalJSON: a range as [start, end) in the evidence.
func (r span) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf("[%d,%d]", r.Start, r.End)), nil
}

// preimage is a block's bytes at the last sync; data nil means n zero bytes (preallocated files
// are mostly zeros, so they cost no memory).
type preimage struct {
	n    int
	data []byte
}

// fileState is one underlying inode. Counters live for the mount; the rest since its last sync.
type fileState struct {
	mu          sync.Mutex
	ino         uint64
	inode       *fs.Inode // where it was last seen: its path in the evidence
	writes      int64
	written     int64
	syncs       int64
	autoSyncs   int64
	writebacks  int64 // made durable by age (-expire), not by a sync
	lastSyncMs  int64
	sinceMs     int64 // the first change since the last sync
	fd          int   // the layer's O_RDWR descriptor of the real file (kept across syncs), or -1
	tracked     bool  // it has changes since its last sync
	syncedSize  int64
	undo        map[int64]preimage
	ranges      []span // byte ranges changed since the last sync, merged
	truncToZero bool   // truncated to 0 since the last sync: ext4 auto_da_alloc commits it at close
}

// --- tracking, per inode; the caller holds s.mu ---

// track starts the undo log of a file with no unsynced change: its size now is its size at the last sync.
func (s *fileState) track(open func() (int, error)) syscall.Errno {
	if s.tracked {
		return 0
	}
	if s.fd < 0 {
		fd, err := open()
		if err != nil {
			return fs.ToErrno(err)
		}
		s.fd = fd
	}
	var st unix.Stat_t
	if err := unix.Fstat(s.fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	s.tracked, s.syncedSize, s.undo, s.ranges, s.truncToZero = true, st.Size, map[int64]preimage{}, nil, false
	s.sinceMs = nowMs()
	return 0
}

// save keeps the bytes of every block overlapping [a, b) below the synced size not saved yet.
// Bytes at or past the synced size need none: the truncate of `drop` removes them.
func (s *fileState) save(a, b int64) syscall.Errno {
	b = min(b, s.syncedSize)
	for blk := a / blockSize; blk*blockSize < b; blk++ {
		if _, ok := s.undo[blk]; ok {
			continue
		}
		buf := make([]byte, blockSize)
		n, err := unix.Pread(s.fd, buf, blk*blockSize)
		if err != nil {
			return fs.ToErrno(err)
		}
		p := preimage{n: n}
		for _, c := range buf[:n] {
			if c != 0 {
				p.data = buf[:n]
				break
			}
		}
		s.undo[blk] = p
	}
	return 0
}

func (s *fileState) changed(a, b int64) {
	if b <= a {
		return
	}
	s.ranges = append(s.ranges, span{a, b})
	sort.Slice(s.ranges, func(i, j int) bool { return s.ranges[i].Start < s.ranges[j].Start })
	out := s.ranges[:1]
	for _, r := range s.ranges[1:] {
		if last := &out[len(out)-1]; r.Start <= last.End {
			last.End = max(last.End, r.End)
		} else {
			out = append(out, r)
		}
	}
	s.ranges = out
}

func (s *fileState) unsynced() (n int64) {
	for _, r := range s.ranges {
		n += r.End - r.Start
	}
	return n
}

func (s *fileState) undoBytes() (n int64) {
	for _, p := range s.undo {
		n += int64(len(p.data))
	}
	return n
}

// synced: everything written so far is durable; `counter` says how (s.syncs: an fsync; s.autoSyncs:
// what ext4's auto_da_alloc commits; s.writebacks: written back by age).
func (s *fileState) synced(counter *int64) {
	s.tracked, s.undo, s.ranges, s.truncToZero = false, nil, nil, false
	*counter++
	s.lastSyncMs = nowMs()
}

func (s *fileState) forget() {
	if s.fd >= 0 {
		unix.Close(s.fd)
	}
	s.fd, s.tracked, s.undo, s.ranges = -1, false, nil, nil
}

func (s *fileState) size() int64 {
	var st unix.Stat_t
	if unix.Fstat(s.fd, &st) != nil {
		return -1
	}
	return st.Size
}

// resize: bytes a truncate removes are saved first (a shrink of synced content must come back).
func (s *fileState) resize(newSize int64) syscall.Errno {
	// a shrink loses bytes (a changed range); a growth adds zeros only: RocketMQ maps 1 GiB
	// commit log files, which must not read as 1 GiB dropped. The size comes back either way.
	cur := s.size()
	if newSize < cur {
		if e := s.save(newSize, cur); e != 0 {
			return e
		}
		s.changed(newSize, cur)
	}
	if newSize == 0 {
		s.truncToZero = true
	}
	return 0
}

// restore puts the file back as it was at its last sync; the evidence of what was dropped.
func (s *fileState) restore(rel string) map[string]any {
	ev := map[string]any{"path": rel, "ino": s.ino, "synced_size": s.syncedSize, "size_before": s.size(),
		"ranges": s.ranges, "bytes": s.unsynced(), "last_sync_ms": s.lastSyncMs, "syncs": s.syncs,
		"auto_syncs": s.autoSyncs, "writebacks": s.writebacks}
	if s.ranges == nil {
		ev["ranges"] = []span{}
	}
	err := unix.Ftruncate(s.fd, s.syncedSize)
	for blk, p := range s.undo {
		if err != nil {
			break
		}
		data := p.data
		if data == nil {
			data = make([]byte, p.n)
		}
		_, err = unix.Pwrite(s.fd, data, blk*blockSize)
	}
	if err != nil {
		ev["error"] = err.Error()
	}
	s.forget()
	return ev
}
