package io.rmqchaos;

import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.file.Path;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;

/**
 * Which brokers serve this consumer's pulls, fed from the pull RPC hook into the status file
 * (ServingStatus, keyed by broker address: pulls answered with messages or with "no new message",
 * pulls refused by response code, spans of service) the platform reads (its serving gate, the
 * analysis); and the work-around for a client race that can leave a push consumer unserved by a
 * master for up to heartbeatBrokerInterval (30 s).
 *
 * The race (read in the client's source; 5.3.3 equals develop on these lines): a rebalance that
 * changes the consumer's queues sets the topic's subVersion to the current time (RebalancePushImpl
 * .messageQueueChanged) and calls sendHeartbeatToAllBrokerWithLockV2(true), which only tryLock()s
 * and gives up ("lock heartBeat, but failed") while the scheduled heartbeat holds the lock. The
 * scheduled heartbeat serialises each broker's request when it sends it, so the master (id 0,
 * first) can get the old subVersion and the slaves the new one. The broker then answers every pull
 * carrying the new version with SUBSCRIPTION_NOT_LATEST (25); the pull callback retries after
 * pullTimeDelayMillsWhenException (1 s) and never sends a heartbeat, so only the next scheduled
 * heartbeat (30 s) ends it. Since 5.2.0 the first rebalance waits rebalance minInterval (1 s,
 * apache/rocketmq#7644), which puts it at about the scheduled heartbeat's first tick (1 s after
 * start); 5.1.x has the same tryLock but rebalances at once on start. Here: a pull refused 25
 * (or 24, SUBSCRIPTION_NOT_EXIST: a restarted broker that has no heartbeat from us yet) asks for one
 * heartbeat to every broker, retried while the lock is busy; the client's own method, found by
 * reflection because it differs between versions (5.1.x: void sendHeartbeatToAllBrokerWithLock();
 * 5.2.0+: boolean sendHeartbeatToAllBrokerWithLockV2(boolean), what the rebalance itself calls).
 */
final class Serving {
    static final int HEARTBEAT_TRIES = 50;
    static final long HEARTBEAT_RETRY_MS = 100;
    /** heartbeats asked for by refusals come at most this often (a refusal per queue arrives at once) */
    static final long HEARTBEAT_MIN_GAP_MS = 500;

    private final ServingStatus status;

    private final ScheduledExecutorService hb = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "rmqchaos-heartbeat");
        t.setDaemon(true);
        return t;
    });
    private final AtomicBoolean pending = new AtomicBoolean();
    private volatile Object factory;
    private volatile Method heartbeat;
    private volatile boolean v2;
    private volatile long lastHeartbeatMs;

    Serving(Path file, String group, String consumerId) {
        this.status = new ServingStatus(file, group, consumerId, "address");
    }

    /** Once the consumer has started: its client instance (the heartbeat's owner) and the start time. */
    void started(DefaultMQPushConsumer c) {
        Object f = c.getDefaultMQPushConsumerImpl().getmQClientFactory();
        Method m;
        boolean isV2;
        try {
            m = f.getClass().getMethod("sendHeartbeatToAllBrokerWithLockV2", boolean.class);
            isV2 = true;
        } catch (NoSuchMethodException e) {
            try {
                m = f.getClass().getMethod("sendHeartbeatToAllBrokerWithLock");
                isV2 = false;
            } catch (NoSuchMethodException e2) {
                System.err.println("rmqchaos: no heartbeat method on " + f.getClass().getName()
                    + ": refused pulls will not ask for one");
                m = null;
                isV2 = false;
            }
        }
        v2 = isV2;
        heartbeat = m;
        factory = f;
        status.started();
    }

    /** A pull's answer from a broker (the RPC hook, on the client's callback thread). Served: messages
     * (SUCCESS), no new message (PULL_NOT_FOUND) or none matching the filter (PULL_RETRY_IMMEDIATELY). */
    void answered(String addr, int code) {
        if (addr == null) {
            return;
        }
        if (code == Codes.SUCCESS || code == Codes.PULL_NOT_FOUND
            || code == Codes.PULL_RETRY_IMMEDIATELY) {
            status.served(addr);
        } else {
            status.refused(addr, String.valueOf(code));
        }
        if (code == Codes.SUBSCRIPTION_NOT_LATEST || code == Codes.SUBSCRIPTION_NOT_EXIST) {
            askHeartbeat();
        }
    }

    /** A pull resent soon at the offset it asked before (Consumer.ServedBy: 4.x, whose client runs no hook
     *  after an asynchronous answer): most likely refused, so a heartbeat is asked for as a refusal would. */
    void resent(String addr) {
        status.heartbeat("resent");
        askHeartbeat();
    }

    private void askHeartbeat() {
        if (factory == null || heartbeat == null || !pending.compareAndSet(false, true)) {
            return;
        }
        long wait = Math.max(0, lastHeartbeatMs + HEARTBEAT_MIN_GAP_MS - HostClock.now());
        hb.schedule(this::sendHeartbeat, wait, TimeUnit.MILLISECONDS);
    }

    private void sendHeartbeat() {
        try {
            for (int i = 0; i < HEARTBEAT_TRIES; i++) {
                Object r = v2 ? heartbeat.invoke(factory, true) : heartbeat.invoke(factory);
                // true: sent (5.2.0+); null: 5.1.x's void, not known (a refusal that follows asks again)
                if (!Boolean.FALSE.equals(r)) {
                    status.heartbeat("sent");
                    return;
                }
                status.heartbeat("lock_busy"); // the scheduled heartbeat holds the lock, or nothing to send yet
                Thread.sleep(HEARTBEAT_RETRY_MS);
            }
            status.heartbeat("failed");
        } catch (Exception e) {
            status.heartbeat("failed");
            System.err.println("rmqchaos: heartbeat after a refused pull failed: " + e);
        } finally {
            lastHeartbeatMs = HostClock.now();
            pending.set(false);
        }
    }

    /** Rewrite the status file when a broker served for the first time, else at most once a second. */
    void maybeWrite(long now) throws IOException {
        status.maybeWrite(now);
    }

    void write() throws IOException {
        status.write();
    }

    void close() {
        hb.shutdownNow();
    }
}
