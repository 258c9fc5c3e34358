package main

// The control socket: one command a line, one JSON object a line back. It stays open after the FUSE
// connection ended (an abort), so `drop` can run then; `quit` ends the process.
//
//	stats                                  per-file counters, totals, injected failures
//	fence                                  from now on every mutating or syncing op fails (EIO) and is counted
//	drop                                   restore every file to its last sync (refused while serving)
//	fail <fsync|write> <EIO|ENOSPC> <glob> [until_ms]   answer that op on matching files with the errno
//	slow <fsync|write> <ms> <glob> [until_ms]           hold that op on matching files ms first (a slow disk)
//	full <pct> [until_ms]                  statfs reads pct % used (0: the real figures again)
//	clear                                  remove every fail and slow rule, and a full one
//	quit                                   lazy-unmount if still mounted, exit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

var errnos = map[string]syscall.Errno{"EIO": syscall.EIO, "ENOSPC": syscall.ENOSPC}

type reply map[string]any

func fail(format string, a ...any) reply {
	return reply{"ok": false, "error": fmt.Sprintf(format, a...)}
}

func (l *layer) serveControl(ln net.Listener, quit func()) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				r, stop := l.command(strings.Fields(sc.Text()))
				b, _ := json.Marshal(r)
				if _, err := c.Write(append(b, '\n')); err != nil {
					return
				}
				if stop {
					quit()
				}
			}
		}()
	}
}

func (l *layer) command(args []string) (reply, bool) {
	if len(args) == 0 {
		return fail("empty command"), false
	}
	switch args[0] {
	case "stats":
		return l.stats(), false
	case "fence":
		l.mu.Lock()
		if l.fencedMs == 0 {
			l.fencedMs = nowMs()
		}
		r := reply{"ok": true, "fenced_ms": l.fencedMs}
		l.mu.Unlock()
		return r, false
	case "drop":
		return l.drop(), false
	case "fail", "slow":
		return l.addRule(args[0], args[1:]), false
	case "full":
		return l.setFull(args[1:]), false
	case "clear":
		l.mu.Lock()
		n := len(l.rules)
		l.rules, l.fullPct, l.fullUntilMs = nil, 0, 0
		l.mu.Unlock()
		return reply{"ok": true, "cleared": n}, false
	case "quit":
		return reply{"ok": true}, true
	}
	return fail("unknown command %q (stats, fence, drop, fail, slow, full, clear, quit)", args[0]), false
}

func (l *layer) setFull(a []string) reply {
	if len(a) < 1 || len(a) > 2 {
		return fail("usage: full <pct> [until_ms]")
	}
	pct, err := strconv.ParseUint(a[0], 10, 64)
	if err != nil || pct > 100 {
		return fail("pct %q is not a whole number in 0..100", a[0])
	}
	var until int64
	if len(a) == 2 {
		if until, err = strconv.ParseInt(a[1], 10, 64); err != nil || until <= 0 {
			return fail("until_ms %q is not a unix time in ms", a[1])
		}
	}
	l.mu.Lock()
	l.fullPct, l.fullUntilMs = pct, until
	l.mu.Unlock()
	return reply{"ok": true, "full_pct": pct}
}

func (l *layer) addRule(cmd string, a []string) reply {
	usage := "usage: fail <fsync|write> <EIO|ENOSPC> <glob> [until_ms]"
	if cmd == "slow" {
		usage = "usage: slow <fsync|write> <ms> <glob> [until_ms]"
	}
	if len(a) < 3 || len(a) > 4 {
		return fail("%s", usage)
	}
	if a[0] != "fsync" && a[0] != "write" {
		return fail("op %q is not fsync or write", a[0])
	}
	r := rule{op: a[0], glob: a[2]}
	if cmd == "slow" {
		v, err := strconv.ParseInt(a[1], 10, 64)
		if err != nil || v <= 0 || v > 600_000 {
			return fail("delay %q is not a number of ms in 1..600000", a[1])
		}
		r.delayMs = v
	} else {
		e, ok := errnos[a[1]]
		if !ok {
			return fail("errno %q is not EIO or ENOSPC", a[1])
		}
		r.errName, r.errno = a[1], e
	}
	if _, err := path.Match(a[2], ""); err != nil {
		return fail("bad glob %q: %v", a[2], err)
	}
	if len(a) == 4 {
		v, err := strconv.ParseInt(a[3], 10, 64)
		if err != nil || v <= 0 {
			return fail("until_ms %q is not a unix time in ms", a[3])
		}
		r.untilMs = v
	}
	l.mu.Lock()
	l.rules = append(l.rules, r)
	n := len(l.rules)
	l.mu.Unlock()
	return reply{"ok": true, "rules": n}
}

func sorted(m map[string]*failure) []*failure {
	out := []*failure{}
	for _, f := range m {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path+out[i].Op < out[j].Path+out[j].Op })
	return out
}

func (l *layer) snapshot() []*fileState {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*fileState, 0, len(l.files))
	for _, s := range l.files {
		out = append(out, s)
	}
	return out
}

func (l *layer) stats() reply {
	files := []reply{}
	var writes, written, syncs, auto, aged, unsynced, undo int64
	for _, s := range l.snapshot() {
		s.mu.Lock()
		f := reply{"path": l.rel(s.inode), "ino": s.ino, "writes": s.writes, "bytes_written": s.written,
			"syncs": s.syncs, "auto_syncs": s.autoSyncs, "writebacks": s.writebacks, "last_sync_ms": s.lastSyncMs,
			"unsynced_bytes": s.unsynced(), "undo_bytes": s.undoBytes(), "synced_size": nil}
		if s.tracked {
			f["synced_size"] = s.syncedSize
		}
		writes, written, syncs, auto = writes+s.writes, written+s.written, syncs+s.syncs, auto+s.autoSyncs
		aged += s.writebacks
		unsynced, undo = unsynced+s.unsynced(), undo+s.undoBytes()
		s.mu.Unlock()
		files = append(files, f)
	}
	sort.Slice(files, func(i, j int) bool { return files[i]["path"].(string) < files[j]["path"].(string) })
	l.mu.Lock()
	defer l.mu.Unlock()
	return reply{"ok": true, "serving": l.serving, "conn": l.conn, "fenced_ms": l.fencedMs,
		"ops_after_fence": l.afterFence, "rules": len(l.rules), "full_pct": l.fullPct, "failures": sorted(l.failures),
		"delays": sorted(l.delays), "files": files,
		"totals": reply{"writes": writes, "bytes_written": written, "syncs": syncs, "auto_syncs": auto,
			"writebacks": aged, "unsynced_bytes": unsynced, "undo_bytes": undo}}
}

// drop: only once the kernel no longer serves the mount. While it does, its page cache would go on
// showing the dropped bytes, and its dirty pages could still be written back over the restore.
func (l *layer) drop() reply {
	l.mu.Lock()
	serving := l.serving
	l.mu.Unlock()
	if serving {
		return fail("the mount is still served: abort its FUSE connection first")
	}
	files := []reply{}
	var total int64
	for _, s := range l.snapshot() {
		s.mu.Lock()
		if s.tracked {
			ev := s.restore(l.rel(s.inode))
			total += ev["bytes"].(int64)
			files = append(files, ev)
		}
		s.mu.Unlock()
	}
	sort.Slice(files, func(i, j int) bool { return files[i]["path"].(string) < files[j]["path"].(string) })
	return reply{"ok": true, "files": files, "bytes": total}
}
