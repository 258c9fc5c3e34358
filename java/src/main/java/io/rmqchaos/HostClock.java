package io.rmqchaos;

/**
 * The host's wall-clock time in ms, whatever this JVM's own clock says. A consumer under libfaketime
 * (its consumer_clock fault) has only CLOCK_REALTIME moved; its monotonic clock stays the host's. So
 * once {@link #underOwnClock} is called, the time is the wall time at that call less the offset the
 * platform started the JVM at (--clock-offset-ms), plus the monotonic time since: the ledger's and the
 * status file's times stay the host's while the client's own clock moves. Otherwise it is plainly
 * System.currentTimeMillis().
 */
final class HostClock {
    private static volatile boolean own = false;
    private static volatile long epoch0;
    private static volatile long nano0;

    private HostClock() {
    }

    static void underOwnClock(long offsetMs) {
        nano0 = System.nanoTime();
        epoch0 = System.currentTimeMillis() - offsetMs;
        own = true;
    }

    static long now() {
        return own ? epoch0 + (System.nanoTime() - nano0) / 1_000_000 : System.currentTimeMillis();
    }
}
