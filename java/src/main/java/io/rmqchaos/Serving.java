package io.rmqchaos;

import java.io.IOException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.remoting.protocol.ResponseCode;

/**
 * Which brokers serve this consumer's pulls (per broker address: pulls answered with messages or with
 * "no new message", pulls refused by response code, spans of service), written to a small JSON
 * status file the platform reads (its serving gate, the analysis); and the work-around for a client
 * race that can leave a push consumer unserved by a master for up to heartbeatBrokerInterval (30 s).
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
    /** a served answer more than this after the previous answer from that broker starts a new span */
    static final long SPAN_GAP_MS = 3000;
    static final int MAX_SPANS = 2000;
    static final int HEARTBEAT_TRIES = 50;
    static final long HEARTBEAT_RETRY_MS = 100;
    /** heartbeats asked for by refusals come at most this often (a refusal per queue arrives at once) */
    static final long HEARTBEAT_MIN_GAP_MS = 500;

    private static final class Broker {
        long served;
        long firstServedMs = -1;
        long lastServedMs = -1;
        long lastAnswerMs = -1;
        boolean lastWasServed;
        final Map<Integer, Long> refused = new TreeMap<>();
        final List<long[]> spans = new ArrayList<>();
        boolean spansTruncated;
    }

    private final Path file;
    private final String group;
    private final String consumerId;
    private final Map<String, Broker> brokers = new TreeMap<>();
    private volatile long startedMs = -1;
    private volatile boolean urgent;
    private volatile long lastWrite;
    private final Object writing = new Object();

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
    private long heartbeatsSent;
    private long heartbeatLockBusy;
    private long heartbeatsFailed;

    Serving(Path file, String group, String consumerId) {
        this.file = file;
        this.group = group;
        this.consumerId = consumerId;
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
        startedMs = HostClock.now();
        urgent = true;
    }

    /** A pull's answer from a broker (the RPC hook, on the client's callback thread). */
    void answered(String addr, int code) {
        if (addr == null) {
            return;
        }
        long now = HostClock.now();
        boolean served = code == ResponseCode.SUCCESS || code == ResponseCode.PULL_NOT_FOUND
            || code == ResponseCode.PULL_RETRY_IMMEDIATELY;
        synchronized (this) {
            Broker b = brokers.computeIfAbsent(addr, k -> new Broker());
            if (served) {
                b.served++;
                if (b.firstServedMs < 0) {
                    b.firstServedMs = now;
                    urgent = true; // the serving gate waits on this
                }
                b.lastServedMs = now;
                long[] last = b.spans.isEmpty() ? null : b.spans.get(b.spans.size() - 1);
                if (last != null && (b.spansTruncated
                    || (b.lastWasServed && now - b.lastAnswerMs <= SPAN_GAP_MS))) {
                    last[1] = now;
                } else if (b.spans.size() < MAX_SPANS) {
                    b.spans.add(new long[] {now, now});
                } else {
                    b.spansTruncated = true; // the last span now stands for everything after it
                    last[1] = now;
                }
            } else {
                b.refused.merge(code, 1L, Long::sum);
            }
            b.lastAnswerMs = now;
            b.lastWasServed = served;
        }
        if (code == ResponseCode.SUBSCRIPTION_NOT_LATEST || code == ResponseCode.SUBSCRIPTION_NOT_EXIST) {
            askHeartbeat();
        }
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
                    synchronized (this) {
                        heartbeatsSent++;
                    }
                    return;
                }
                synchronized (this) {
                    heartbeatLockBusy++; // the scheduled heartbeat holds the lock, or nothing to send yet
                }
                Thread.sleep(HEARTBEAT_RETRY_MS);
            }
            synchronized (this) {
                heartbeatsFailed++;
            }
        } catch (Exception e) {
            synchronized (this) {
                heartbeatsFailed++;
            }
            System.err.println("rmqchaos: heartbeat after a refused pull failed: " + e);
        } finally {
            lastHeartbeatMs = HostClock.now();
            pending.set(false);
        }
    }

    /** Rewrite the status file when a broker served for the first time, else at most once a second. */
    void maybeWrite(long now) throws IOException {
        if (urgent || now - lastWrite >= 1000) {
            write();
        }
    }

    void write() throws IOException {
        synchronized (writing) { // the main loop and the SIGTERM hook may both write
            writeOnce();
        }
    }

    private void writeOnce() throws IOException {
        urgent = false;
        lastWrite = HostClock.now();
        StringBuilder sb = new StringBuilder(512);
        synchronized (this) {
            sb.append("{\"consumer_id\":").append(Text.esc(consumerId))
                .append(",\"group\":").append(Text.esc(group))
                .append(",\"started_ms\":").append(startedMs < 0 ? "null" : String.valueOf(startedMs))
                .append(",\"written_ms\":").append(lastWrite)
                .append(",\"heartbeats\":{\"sent\":").append(heartbeatsSent)
                .append(",\"lock_busy\":").append(heartbeatLockBusy)
                .append(",\"failed\":").append(heartbeatsFailed).append('}')
                .append(",\"brokers\":{");
            boolean first = true;
            for (Map.Entry<String, Broker> e : brokers.entrySet()) {
                Broker b = e.getValue();
                sb.append(first ? "" : ",").append(Text.esc(e.getKey())).append(":{\"served\":").append(b.served)
                    .append(",\"first_served_ms\":").append(b.firstServedMs < 0 ? "null" : String.valueOf(b.firstServedMs))
                    .append(",\"last_served_ms\":").append(b.lastServedMs < 0 ? "null" : String.valueOf(b.lastServedMs))
                    .append(",\"refused\":{");
                boolean f2 = true;
                for (Map.Entry<Integer, Long> r : b.refused.entrySet()) {
                    sb.append(f2 ? "" : ",").append('"').append(r.getKey()).append("\":").append(r.getValue());
                    f2 = false;
                }
                sb.append("},\"spans\":[");
                for (int i = 0; i < b.spans.size(); i++) {
                    long[] s = b.spans.get(i);
                    sb.append(i == 0 ? "" : ",").append('[').append(s[0]).append(',').append(s[1]).append(']');
                }
                sb.append("],\"spans_truncated\":").append(b.spansTruncated).append('}');
                first = false;
            }
            sb.append("}}\n");
        }
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        Files.write(tmp, sb.toString().getBytes(StandardCharsets.UTF_8));
        Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    void close() {
        hb.shutdownNow();
    }
}
