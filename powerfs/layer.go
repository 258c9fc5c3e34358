package main

// The forgetting layer: go-fuse's loopback passes every operation through to the real directory;
// this file adds only what a power loss needs. Before a 4 KiB block below the file's size at its
// last sync is first changed, its bytes are saved (undo log, keyed by the underlying inode number
// so a rename keeps it); an fsync/fdatasync/msync discards the inode's undo log; `drop` writes the
// saved blocks back and truncates each file to its size at its last sync.

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

const blockSize = 4096

type failure struct {
	Path    string `json:"path"`
	Op      string `json:"op"`
	Errno   string `json:"errno,omitempty"`
	Count   int64  `json:"count"`
	DelayMs int64  `json:"delay_ms,omitempty"` // a `slow` rule's: the delay it added, summed
	First   int64  `json:"first_ms"`
	Last    int64  `json:"last_ms"`
}

// rule: a `fail` rule answers with errno; a `slow` rule (errno 0) holds the op delayMs first.
type rule struct {
	op, glob, errName string
	errno             syscall.Errno
	delayMs           int64
	untilMs           int64
}

type layer struct {
	root        string
	writeback   bool
	autoDaAlloc bool
	rootInode   *fs.Inode

	mu         sync.Mutex
	files      map[uint64]*fileState
	rules      []rule
	failures   map[string]*failure
	delays     map[string]*failure
	serving    bool
	conn       uint32
	fencedMs   int64
	afterFence int64
	// `full`: statfs answers as if the file system were fullPct % used (0: the real figures)
	fullPct     uint64
	fullUntilMs int64
}

func nowMs() int64 { return time.Now().UnixMilli() }

func (l *layer) state(ino uint64, in *fs.Inode) *fileState {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.files[ino]
	if s == nil {
		s = &fileState{ino: ino, fd: -1}
		l.files[ino] = s
	}
	if in != nil {
		s.inode = in
	}
	return s
}

// fenced: after `fence` (the first step of an abort) the layer changes nothing more; every
// mutating or syncing operation fails with EIO and is counted.
func (l *layer) fenced() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fencedMs != 0 {
		l.afterFence++
		return true
	}
	return false
}

// injected: the errno a `fail` rule sets for this operation on this path, counted; 0 if none. A
// `slow` rule that matches first adds its delay to the returned delay (counted apart) and the search
// goes on: a slow disk can fail too.
func (l *layer) injected(op, rel string) (syscall.Errno, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := nowMs()
	var delay int64
	for _, r := range l.rules {
		if r.op != op || (r.untilMs != 0 && now >= r.untilMs) {
			continue
		}
		if ok, _ := path.Match(r.glob, rel); !ok {
			continue
		}
		if r.errno == 0 {
			if delay == 0 {
				delay = r.delayMs
				count(l.delays, rel, op, "", now).DelayMs += r.delayMs
			}
			continue
		}
		count(l.failures, rel, op, r.errName, now)
		return r.errno, time.Duration(delay) * time.Millisecond
	}
	return 0, time.Duration(delay) * time.Millisecond
}

func count(m map[string]*failure, rel, op, errName string, now int64) *failure {
	k := rel + "\x00" + op + "\x00" + errName
	f := m[k]
	if f == nil {
		f = &failure{Path: rel, Op: op, Errno: errName, First: now}
		m[k] = f
	}
	f.Count++
	f.Last = now
	return f
}

// held: an op a `slow` rule delays waits, then finds the layer fenced if the power went meanwhile
// (a flush cut short by the power loss made nothing durable).
func (l *layer) held(d time.Duration) bool {
	if d <= 0 {
		return false
	}
	time.Sleep(d)
	return l.isFenced()
}

func (l *layer) rel(in *fs.Inode) string {
	if in == nil {
		return ""
	}
	return in.Path(l.rootInode)
}

// --- the node and the file handle ---

type node struct {
	fs.LoopbackNode
	l *layer
}

// handle: a loopback file whose fd and inode number the layer knows. PassthroughFd is shadowed:
// with FUSE passthrough the kernel would read and write the real file without asking the layer.
type handle struct {
	*fs.LoopbackFile
	fd  int
	ino uint64
}

func (h *handle) PassthroughFd() (int, bool) { return 0, false }

// Ioctl: refused, so no ioctl (FICLONE, a punch through an ioctl) changes bytes behind the undo log.
func (h *handle) Ioctl(ctx context.Context, cmd uint32, arg uint64, input []byte, output []byte) (int32, syscall.Errno) {
	return 0, syscall.ENOTTY
}

func (l *layer) newNode(root *fs.LoopbackRoot, parent *fs.Inode, name string, st *syscall.Stat_t) fs.InodeEmbedder {
	return &node{LoopbackNode: fs.LoopbackNode{RootData: root}, l: l}
}

// Statfs: the real file system's figures, or under a `full` rule free space cut so that it reads as
// fullPct % used, as RocketMQ's disk check computes it ((total - free) / total): a disk that fills
// without the bytes to fill it. Writes still succeed: only what the broker decides from the figures
// changes.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	if errno := n.LoopbackNode.Statfs(ctx, out); errno != 0 {
		return errno
	}
	n.l.mu.Lock()
	pct, until := n.l.fullPct, n.l.fullUntilMs
	n.l.mu.Unlock()
	if pct > 0 && (until == 0 || nowMs() < until) {
		free := out.Blocks * (100 - pct) / 100
		out.Bfree, out.Bavail = min(out.Bfree, free), min(out.Bavail, free)
	}
	return 0
}

func (n *node) abs(name string) string {
	return filepath.Join(n.RootData.Path, n.l.rel(n.EmbeddedInode()), name)
}

func (n *node) wrap(fh fs.FileHandle) (fs.FileHandle, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return fh, 0
	}
	fd, _ := lf.PassthroughFd()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		lf.Release(context.Background())
		return nil, fs.ToErrno(err)
	}
	return &handle{LoopbackFile: lf, fd: fd, ino: st.Ino}, 0
}

// accessMode: with the writeback cache the kernel reads pages of files opened write-only (to fill
// a page written in part), so those are opened read-write underneath.
func (n *node) accessMode(flags uint32) uint32 {
	if n.l.writeback && flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		flags = flags&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return flags
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, ff, e := n.LoopbackNode.Open(ctx, n.accessMode(flags))
	if e != 0 {
		return nil, 0, e
	}
	fh, e = n.wrap(fh)
	return fh, ff, e
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if n.l.fenced() {
		return nil, nil, 0, syscall.EIO
	}
	var st unix.Stat_t
	if flags&syscall.O_TRUNC != 0 && unix.Lstat(n.abs(name), &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		// an existing file truncated by O_CREAT|O_TRUNC (the kernel's dentry did not know it)
		if e := n.l.truncate(nil, st.Ino, n.abs(name), 0); e != 0 {
			return nil, nil, 0, e
		}
	}
	ch, fh, ff, e := n.LoopbackNode.Create(ctx, name, n.accessMode(flags), mode, out)
	if e != 0 {
		return nil, nil, 0, e
	}
	fh, e = n.wrap(fh)
	return ch, fh, ff, e
}

func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP // a file with no name: nothing to report or restore
}

func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	return n.Writev(ctx, f, [][]byte{data}, off)
}

func (n *node) Writev(ctx context.Context, f fs.FileHandle, iov [][]byte, off int64) (uint32, syscall.Errno) {
	h, ok := f.(*handle)
	if !ok {
		return 0, syscall.EBADF
	}
	if n.l.fenced() {
		return 0, syscall.EIO
	}
	e, d := n.l.injected("write", n.l.rel(n.EmbeddedInode()))
	if n.l.held(d) {
		return 0, syscall.EIO
	}
	if e != 0 {
		return 0, e
	}
	var total int64
	for _, b := range iov {
		total += int64(len(b))
	}
	s := n.l.state(h.ino, n.EmbeddedInode())
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.track(func() (int, error) { return reopen(h.fd) }); e != 0 {
		return 0, e
	}
	if e := s.save(off, off+total); e != 0 {
		return 0, e
	}
	w, err := unix.Pwritev(h.fd, iov, off)
	if w > 0 {
		s.changed(off, off+int64(w))
		s.writes++
		s.written += int64(w)
	}
	return uint32(max(w, 0)), fs.ToErrno(err)
}

// reopen: the layer's own read-write descriptor of the file behind a handle (which may be write-only).
func reopen(fd int) (int, error) {
	return unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDWR|unix.O_CLOEXEC, 0)
}

// truncate records a size change made through handle h (or the path, without one) before it is made.
func (l *layer) truncate(in *fs.Inode, ino uint64, abs string, size int64) syscall.Errno {
	s := l.state(ino, in)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.track(func() (int, error) { return unix.Open(abs, unix.O_RDWR|unix.O_CLOEXEC, 0) }); e != 0 {
		return e
	}
	return s.resize(size)
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.l.fenced() {
		return syscall.EIO
	}
	if size, ok := in.GetSize(); ok {
		s, e := n.stateOf(f)
		if e != 0 {
			return e
		}
		s.mu.Lock()
		defer s.mu.Unlock() // held across the truncate itself: no write slips between save and truncate
		open := func() (int, error) { return unix.Open(n.abs(""), unix.O_RDWR|unix.O_CLOEXEC, 0) }
		if h, ok := f.(*handle); ok {
			open = func() (int, error) { return reopen(h.fd) }
		}
		if e := s.track(open); e != 0 {
			return e
		}
		if e := s.resize(int64(size)); e != 0 {
			return e
		}
	}
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

func (n *node) stateOf(f fs.FileHandle) (*fileState, syscall.Errno) {
	if h, ok := f.(*handle); ok {
		return n.l.state(h.ino, n.EmbeddedInode()), 0
	}
	var st unix.Stat_t
	if err := unix.Lstat(n.abs(""), &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.l.state(st.Ino, n.EmbeddedInode()), 0
}

func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	h, ok := f.(*handle)
	if !ok {
		return syscall.EBADF
	}
	if n.l.fenced() {
		return syscall.EIO
	}
	if mode&^unix.FALLOC_FL_KEEP_SIZE != 0 || mode == 0 { // punch, zero, collapse, insert: bytes change; 0: the size may grow
		s := n.l.state(h.ino, n.EmbeddedInode())
		s.mu.Lock()
		defer s.mu.Unlock()
		if e := s.track(func() (int, error) { return reopen(h.fd) }); e != 0 {
			return e
		}
		cur := s.size()
		if mode != 0 { // mode 0 only allocates (zeros past the end): the drop's truncate undoes it
			if e := s.save(int64(off), cur); e != 0 {
				return e
			}
			s.changed(int64(off), max(cur, int64(off+size)))
		}
	}
	return h.LoopbackFile.Allocate(ctx, off, size, mode)
}

// Fsync (fsync, fdatasync, msync, FileChannel.force): the inode's data is durable once the real
// fsync returned; the whole inode counts, as the kernel sends FUSE no range.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	h, ok := f.(*handle)
	if !ok {
		return syscall.EBADF
	}
	if n.l.fenced() {
		return syscall.EIO
	}
	e, d := n.l.injected("fsync", n.l.rel(n.EmbeddedInode()))
	if n.l.held(d) {
		return syscall.EIO // cut short: the undo log stays
	}
	if e != 0 {
		return e // the undo log stays: nothing was made durable
	}
	s := n.l.state(h.ino, n.EmbeddedInode())
	s.mu.Lock()
	defer s.mu.Unlock()
	if n.l.isFenced() {
		return syscall.EIO
	}
	if err := unix.Fsync(h.fd); err != nil {
		return fs.ToErrno(err)
	}
	if n.l.isFenced() {
		return syscall.EIO // the power went during the fsync: the undo log stays, the drop reverts it
	}
	s.synced(&s.syncs)
	return 0
}

// Release: ext4's auto_da_alloc writes a file truncated to 0 out when it is closed (RocketMQ 5.5.0
// rewrites its config JSON in place through O_TRUNC, without fsync); the kernel has written its
// dirty pages back before (FLUSH at close).
func (n *node) Release(ctx context.Context, f fs.FileHandle) syscall.Errno {
	if h, ok := f.(*handle); ok && n.l.autoDaAlloc && !n.l.isFenced() {
		s := n.l.state(h.ino, nil)
		s.mu.Lock()
		if s.truncToZero {
			s.synced(&s.autoSyncs)
		}
		s.mu.Unlock()
	}
	if r, ok := f.(fs.FileReleaser); ok {
		return r.Release(ctx)
	}
	return 0
}

func (l *layer) isFenced() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fencedMs != 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.l.fenced() {
		return syscall.EIO
	}
	var st unix.Stat_t
	had := unix.Lstat(n.abs(name), &st) == nil
	if e := n.LoopbackNode.Unlink(ctx, name); e != 0 {
		return e
	}
	if had && st.Nlink <= 1 {
		n.l.forget(st.Ino) // gone for good: entries are durable at once, nothing to restore
	}
	return 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if n.l.fenced() {
		return syscall.EIO
	}
	return n.LoopbackNode.Rmdir(ctx, name)
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n.l.fenced() {
		return nil, syscall.EIO
	}
	return n.LoopbackNode.Mkdir(ctx, name, mode, out)
}

// Rename: entries are durable at once. A rename over an existing file commits the renamed file's
// data (ext4 auto_da_alloc, replace-via-rename); the replaced inode, if that was its last name, is gone.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if n.l.fenced() {
		return syscall.EIO
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	var src, dst unix.Stat_t
	srcOK := unix.Lstat(n.abs(name), &src) == nil
	dstOK := unix.Lstat(np.abs(newName), &dst) == nil
	if e := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags); e != 0 {
		return e
	}
	if !srcOK || !dstOK || dst.Ino == src.Ino || flags&unix.RENAME_EXCHANGE != 0 {
		return 0
	}
	if n.l.autoDaAlloc && src.Mode&unix.S_IFMT == unix.S_IFREG {
		s := n.l.state(src.Ino, nil)
		s.mu.Lock()
		s.synced(&s.autoSyncs)
		s.mu.Unlock()
	}
	if dst.Nlink <= 1 {
		n.l.forget(dst.Ino)
	}
	return 0
}

func (l *layer) forget(ino uint64) {
	l.mu.Lock()
	s := l.files[ino]
	delete(l.files, ino)
	l.mu.Unlock()
	if s != nil {
		s.mu.Lock()
		s.forget()
		s.mu.Unlock()
	}
}
