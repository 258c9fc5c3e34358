package io.rmqchaos;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The status file of which brokers serve one consumer's reads, the one writer for both kinds of
 * consumer (rmqchaos/run/serving.py reads it; docs/client.md): per key, reads served and refused by
 * answer code, the first and last served time and the spans of time it served. The keys are broker
 * addresses for the remoting consumer (Serving: the RPC hook's address of each pull's answer) and
 * broker names for a consumer through the proxy (PopServing: the broker a receive was answered from),
 * said by "keyed_by". "counts" says what the served answers were where the caller tells (POP:
 * messages, no_new_message, and redirected). No RocketMQ class here: both consumers' JVMs load it.
 */
final class ServingStatus {
    /** a served answer more than this after the previous answer from that broker starts a new span */
    static final long SPAN_GAP_MS = 3000;
    static final int MAX_SPANS = 2000;

    private static final class Broker {
        long served;
        long firstServedMs = -1;
        long lastServedMs = -1;
        long lastAnswerMs = -1;
        boolean lastWasServed;
        final Map<String, Long> refused = new TreeMap<>();
        final Map<String, Long> counts = new TreeMap<>();
        final List<long[]> spans = new ArrayList<>();
        boolean spansTruncated;
    }

    private final Path file;
    private final String group;
    private final String consumerId;
    private final String keyedBy;
    private final Map<String, Broker> brokers = new TreeMap<>();
    private long startedMs = -1;
    private String unwatched;
    private long heartbeatsSent;
    private long heartbeatLockBusy;
    private long heartbeatsFailed;
    private long resends;
    private volatile boolean urgent;
    private volatile long lastWrite;
    private final Object writing = new Object();

    /** keyedBy: "address" (remoting pulls) or "broker_name" (receives through the proxy) */
    ServingStatus(Path file, String group, String consumerId, String keyedBy) {
        this.file = file;
        this.group = group;
        this.consumerId = consumerId;
        this.keyedBy = keyedBy;
    }

    synchronized void started() {
        startedMs = HostClock.now();
        urgent = true;
    }

    /** Nothing will be recorded, and why (one line: the platform says it where it cannot gate). */
    synchronized void unwatched(String why) {
        unwatched = why;
        urgent = true;
    }

    /** A served answer from `key` (the broker accepted the consumer's read). */
    void served(String key) {
        answer(key, true, null);
    }

    /** An answer from `key` that refused the read, by its code. */
    void refused(String key, String code) {
        answer(key, false, code);
    }

    private synchronized void answer(String key, boolean served, String code) {
        if (key == null) {
            return;
        }
        long now = HostClock.now();
        Broker b = brokers.computeIfAbsent(key, k -> new Broker());
        if (served) {
            b.served++;
            if (b.firstServedMs < 0) {
                b.firstServedMs = now;
                urgent = true; // the serving gate waits on this
            }
            b.lastServedMs = now;
            long[] last = b.spans.isEmpty() ? null : b.spans.get(b.spans.size() - 1);
            if (last != null && (b.spansTruncated || (b.lastWasServed && now - b.lastAnswerMs <= SPAN_GAP_MS))) {
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

    /** One more of `what` for `key` (what a served answer was, or what else was seen of that broker). */
    synchronized void count(String key, String what) {
        if (key != null) {
            brokers.computeIfAbsent(key, k -> new Broker()).counts.merge(what, 1L, Long::sum);
        }
    }

    /** The remoting consumer's heartbeats after a refused pull (Serving): sent, lock_busy or failed; and
     *  resent: a 4.x pull resent soon at the same offset, taken for a refusal the client did not show. */
    synchronized void heartbeat(String outcome) {
        switch (outcome) {
            case "resent":
                resends++;
                break;
            case "sent":
                heartbeatsSent++;
                break;
            case "lock_busy":
                heartbeatLockBusy++;
                break;
            default:
                heartbeatsFailed++;
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
                .append(",\"keyed_by\":").append(Text.esc(keyedBy))
                .append(",\"unwatched\":").append(Text.esc(unwatched))
                .append(",\"started_ms\":").append(startedMs < 0 ? "null" : String.valueOf(startedMs))
                .append(",\"written_ms\":").append(lastWrite)
                .append(",\"heartbeats\":{\"sent\":").append(heartbeatsSent)
                .append(",\"lock_busy\":").append(heartbeatLockBusy)
                .append(",\"failed\":").append(heartbeatsFailed)
                .append(",\"resent\":").append(resends).append('}')
                .append(",\"brokers\":{");
            boolean first = true;
            for (Map.Entry<String, Broker> e : brokers.entrySet()) {
                Broker b = e.getValue();
                sb.append(first ? "" : ",").append(Text.esc(e.getKey())).append(":{\"served\":").append(b.served)
                    .append(",\"first_served_ms\":").append(b.firstServedMs < 0 ? "null" : String.valueOf(b.firstServedMs))
                    .append(",\"last_served_ms\":").append(b.lastServedMs < 0 ? "null" : String.valueOf(b.lastServedMs))
                    .append(",\"refused\":");
                counts(sb, b.refused);
                sb.append(",\"counts\":");
                counts(sb, b.counts);
                sb.append(",\"spans\":[");
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

    private static void counts(StringBuilder sb, Map<String, Long> m) {
        sb.append('{');
        boolean first = true;
        for (Map.Entry<String, Long> r : m.entrySet()) {
            sb.append(first ? "" : ",").append(Text.esc(r.getKey())).append(':').append(r.getValue());
            first = false;
        }
        sb.append('}');
    }
}
