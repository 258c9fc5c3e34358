// powerfs: a FUSE file system that passes a directory through and can forget every write that was
// never made durable by fsync, fdatasync or msync: a machine's power loss, on command.
// docs/powerfs.md describes it; cluster/powerfs.py starts and drives it.
//
//	powerfs -root <real dir> -mount <mount point> -control <unix socket> [-writeback=true] [-auto-da-alloc=true] [-expire=0]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FsName starts every mount's source in /proc/self/mountinfo: how the platform recognises its mounts.
// The server's pid and kernel start time follow it, so a mount whose run directory is gone can
// still be reaped by PID (rmqchaos/procs.py compares both).
const FsName = "rmqchaos-powerfs"

func say(format string, a ...any) { fmt.Fprintf(os.Stderr, "powerfs: "+format+"\n", a...) }

func die(format string, a ...any) {
	say(format, a...)
	os.Exit(1)
}

// starttime: field 22 of /proc/self/stat, the kernel start time in clock ticks.
func starttime() string {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return "0"
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
	return f[19]
}

func main() {
	root := flag.String("root", "", "the real directory passed through")
	mnt := flag.String("mount", "", "the mount point")
	ctl := flag.String("control", "", "the control socket's path")
	// Writeback cache on: write(2) then lands in the kernel's page cache and reaches the layer at
	// writeback, fsync or close, as on a disk file system; so a power loss also forgets write(2)
	// data still dirty in the kernel, and an injected write error surfaces at fsync as on a real
	// failing disk. Mapped writes are cached either way. It is correct here because every change
	// of the real directory goes through this mount, and `drop` runs only after the connection is
	// aborted (a new mount starts with a cold cache). Speed: docs/powerfs.md.
	writeback := flag.Bool("writeback", true, "ask the kernel for the FUSE writeback cache")
	expire := flag.Duration("expire", 0, "durable by age: a file changed at least this long ago is written back at the next 5 s tick (the kernel's dirty_expire; 0: only a sync makes data durable)")
	autoDa := flag.Bool("auto-da-alloc", true, "model ext4's auto_da_alloc: a rename over a file, and a file truncated to 0 and closed, commit its data")
	flag.Parse()
	if *root == "" || *mnt == "" || *ctl == "" {
		die("usage: powerfs -root DIR -mount DIR -control SOCKET")
	}
	rootAbs, _ := filepath.Abs(*root)
	var st syscall.Stat_t
	if err := syscall.Stat(rootAbs, &st); err != nil {
		die("root %s: %v", rootAbs, err)
	}

	l := &layer{root: rootAbs, writeback: *writeback, autoDaAlloc: *autoDa, files: map[uint64]*fileState{},
		failures: map[string]*failure{}, delays: map[string]*failure{}}
	lr := &fs.LoopbackRoot{Path: rootAbs, Dev: uint64(st.Dev), NewNode: l.newNode}
	rootNode := l.newNode(lr, nil, "", &st)
	lr.RootNode = rootNode

	// the control socket first: the caller may ask for stats as soon as the mount appears
	os.Remove(*ctl)
	ln, err := net.Listen("unix", *ctl)
	if err != nil {
		die("control socket %s: %v", *ctl, err)
	}
	var mounted atomic.Bool
	ready := make(chan struct{})
	quit := func() {
		// not before fs.Mount returned: until then the main thread may be inside go-fuse's poll-hack
		// open on this very mount, and exiting while a request of ours is unanswered leaves that
		// thread in D state for good (seen once on a loaded host)
		select {
		case <-ready:
		case <-time.After(10 * time.Second):
		}
		if mounted.Load() {
			// lazy: a process still inside keeps its files until it closes them
			if err := unix.Unmount(*mnt, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
				say("unmount %s: %v", *mnt, err)
			}
		}
		ln.Close()
		os.Remove(*ctl)
		os.Exit(0)
	}
	go l.serveControl(ln, quit)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sig
		say("%v: exiting, nothing restored", s)
		quit()
	}()

	sec := time.Second
	var extra uint64
	if *writeback {
		extra = fuse.CAP_WRITEBACK_CACHE
	}
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:            fmt.Sprintf("%s:%d:%s", FsName, os.Getpid(), starttime()),
			Name:              "powerfs",
			DirectMountStrict: true, // mount(2) as root; there is no fusermount here
			MaxWrite:          1 << 20,
			// no passthrough (the kernel would bypass the layer) and no direct_io (shared writable mmap must work)
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
			ExtraCapabilities:    extra,
		},
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
	}
	l.rootInode = rootNode.EmbeddedInode()
	server, err := fs.Mount(*mnt, rootNode, opts)
	if err != nil {
		ln.Close()
		os.Remove(*ctl)
		die("mount %s: %v", *mnt, err)
	}
	mounted.Store(true)
	var mst unix.Stat_t
	if err := unix.Stat(*mnt, &mst); err == nil {
		l.conn = unix.Minor(mst.Dev) // /sys/fs/fuse/connections/<conn>
	}
	l.mu.Lock()
	l.serving = true
	l.mu.Unlock()
	close(ready) // after our own last request on the mount (the stat above)
	if *expire > 0 {
		go l.writebackLoop(*expire)
	}
	line, _ := json.Marshal(map[string]any{"event": "mounted", "pid": os.Getpid(), "conn": l.conn,
		"root": rootAbs, "mount": *mnt, "writeback": *writeback, "auto_da_alloc": *autoDa,
		"expire_ms": expire.Milliseconds()})
	fmt.Println(string(line))

	go func() {
		server.Wait() // returns when the kernel ends the connection: abort, or unmount
		l.mu.Lock()
		l.serving = false
		l.mu.Unlock()
		say("FUSE connection %d ended; control socket still open", l.conn)
	}()

	select {} // quit (the control socket, a signal) ends the process
}
