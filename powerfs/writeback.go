package main

// Durable by age (-expire D): a real kernel writes a dirty inode back once it has been dirty for
// vm.dirty_expire_centisecs (30 s by default), on the flusher's vm.dirty_writeback_centisecs tick
// (5 s), and ext4 commits its journal every 5 s; a machine that loses power later keeps those bytes
// though nothing fsynced them. Off (0) by default: the layer then models the worst case, as LazyFS
// does, and only a sync makes anything durable. The age counts from the layer's first sight of the
// change since the file's last sync: with the FUSE writeback cache the kernel sends mmap and write(2)
// data at its own writeback, so the layer sees a change late and keeps it unsynced longer than a
// disk would (it errs towards forgetting).

import "time"

const writebackTick = 5 * time.Second // vm.dirty_writeback_centisecs

// writebackLoop makes durable, every tick, each file whose changes since its last sync began at
// least `expire` ago (the kernel writes the whole inode back: its newer pages too). Nothing after
// the fence: the power is gone.
func (l *layer) writebackLoop(expire time.Duration) {
	for range time.Tick(writebackTick) {
		if l.isFenced() {
			return
		}
		cutoff := nowMs() - expire.Milliseconds()
		for _, s := range l.snapshot() {
			s.mu.Lock()
			if s.tracked && s.sinceMs <= cutoff && !l.isFenced() {
				s.synced(&s.writebacks)
			}
			s.mu.Unlock()
		}
	}
}
