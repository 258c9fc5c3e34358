package io.rmqchaos;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.CRC32;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.SendReceipt;

/**
 * The gRPC load: the RocketMQ 5.x Java client's Producer (apache/rocketmq-clients) sending through the
 * proxy, on the schedule the Locust load keeps (message i intended at start + i / rate, bounded by
 * --duration and --messages), writing the send ledger in its one schema (rmqchaos/ledger/schema.py): an
 * intent line before each attempt, an outcome line when it ends.
 *
 * Each attempt is one call: the client's own retries are off (maxAttempts 1), so every attempt the
 * policy makes (--attempts, a retry on any failure) is a ledger line of its own, as the remoting load's.
 * Answers: a SendReceipt is outcome ok, status SEND_OK (the proxy answers a weak store status with an
 * error code, not a receipt); a ClientException is outcome error with the proxy's response code
 * (apache.rocketmq.v2.Code: 5 digits, apart from the remoting codes); no answer within --timeout-ms is
 * outcome timeout. An attempt is counted as sent unless it failed for want of a connection to the proxy
 * (neverConnected): the client does not say otherwise whether its request left.
 *
 * The journal is written through a buffered writer, flushed every 100 ms and fsync'd every second and on
 * exit (a SIGKILL loses at most the last 100 ms: attempts whose outcome is missing are indeterminate).
 */
public final class GrpcProducer {
    private static final Pattern CODE = Pattern.compile("response-code=(\\d+)");
    private static final Pattern BUSY = Pattern.compile("\\] (\\[(?:TIMEOUT_CLEAN_QUEUE|PCBUSY_CLEAN_QUEUE|REJECTREQUEST|OVERLOAD"
        + "|PC_SYNCHRONIZED)\\].*)$");

    private GrpcProducer() {
    }

    public static void main(String[] a) {
        Text.runOrExit(a, GrpcProducer::run);
    }

    private static void run(String[] a) throws Exception {
        if (a.length == 0 || a[0].equals("--help")) {
            System.out.println("usage: GrpcProducer --endpoints H:P --topic T --out FILE [--run-id R] [--producer-id P] "
                + "[--key-base KB] [--rate R] [--duration S] [--messages N] [--size B] [--timeout-ms MS] [--attempts N] "
                + "[--policy NAME] [--threads N] [--tag TAG] [--started FILE] [--summary FILE]");
            return;
        }
        final String endpoints = Text.arg(a, "--endpoints", null);
        final String topic = Text.arg(a, "--topic", null);
        final String out = Text.arg(a, "--out", null);
        if (endpoints == null || topic == null || out == null) {
            System.err.println("error: --endpoints, --topic and --out are required");
            System.exit(2);
        }
        final String runId = Text.arg(a, "--run-id", "");
        final String producerId = Text.arg(a, "--producer-id", "grpc0");
        final String keyBase = Text.arg(a, "--key-base", producerId + "-");
        final double rate = Double.parseDouble(Text.arg(a, "--rate", "100"));
        final double duration = Double.parseDouble(Text.arg(a, "--duration", "30"));
        final long messages = Long.parseLong(Text.arg(a, "--messages", "0")); // 0: rate x duration
        final int size = Integer.parseInt(Text.arg(a, "--size", "1024"));
        final long timeoutMs = Long.parseLong(Text.arg(a, "--timeout-ms", "3000"));
        final int attempts = Integer.parseInt(Text.arg(a, "--attempts", "1"));
        final String policy = Text.arg(a, "--policy", "no_retry");
        final int threads = Integer.parseInt(Text.arg(a, "--threads", "8"));
        final String tag = Text.arg(a, "--tag", null);
        final String started = Text.arg(a, "--started", null);
        final String summary = Text.arg(a, "--summary", null);
        final long quota = messages > 0 ? messages : Math.max(1, (long) Math.ceil(rate * duration));

        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration conf = ClientConfiguration.newBuilder().setEndpoints(endpoints).enableSsl(false)
            .setRequestTimeout(Duration.ofMillis(timeoutMs)).build();
        final Producer producer = provider.newProducerBuilder().setClientConfiguration(conf).setTopics(topic)
            .setMaxAttempts(1).build();

        // "-": no ledger at all (rmqchaos bench producer --mode grpc: the 5.x client alone, the same loop)
        final Journal journal = new Journal(out);
        final boolean ledger = journal.on();
        final AtomicLong seq = new AtomicLong();
        final AtomicLong attemptIds = new AtomicLong(1);
        final AtomicLong ok = new AtomicLong();
        final AtomicLong failed = new AtomicLong();
        final byte[] filler = filler(size);
        final String head = "\"run_id\":" + Text.esc(runId) + ",\"producer_id\":" + Text.esc(producerId)
            + ",\"attempt_id\":";
        final String pol = ",\"policy\":" + Text.esc(policy);

        final long t0 = System.currentTimeMillis();
        final long end = t0 + (long) (duration * 1000);
        if (started != null) {
            Files.write(Paths.get(started), ("{\"start_s\": " + secs(t0) + "}").getBytes(StandardCharsets.UTF_8));
        }
        System.err.println("grpc producer " + producerId + " started: " + endpoints + " topic " + topic + " rate " + rate
            + "/s for " + duration + " s, at most " + quota + " messages");
        List<Thread> workers = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            Thread th = new Thread(() -> {
                while (true) {
                    long s = seq.getAndIncrement();
                    long intended = t0 + (long) (s * 1000 / rate);
                    if (s >= quota || intended >= end) {
                        return;
                    }
                    long wait = intended - System.currentTimeMillis();
                    if (wait > 0) {
                        try {
                            Thread.sleep(wait);
                        } catch (InterruptedException e) {
                            return;
                        }
                    }
                    String key = keyBase + s;
                    byte[] body = body(key, producerId, s, filler, size);
                    for (int attempt = 1; attempt <= attempts; attempt++) {
                        long aid = attemptIds.getAndIncrement();
                        long start = System.currentTimeMillis();
                        String intent = !ledger ? "" : head + aid + ",\"key\":" + Text.esc(key) + ",\"attempt\":"
                            + attempt + ",\"topic\":" + Text.esc(topic) + pol + ",\"intended_ms\":" + intended
                            + ",\"start_ms\":" + start;
                        if (ledger) {
                            journal.append("{\"rec\":\"intent\"," + intent + "}\n", false);
                        }
                        org.apache.rocketmq.client.apis.message.MessageBuilder mb = provider.newMessageBuilder()
                            .setTopic(topic).setKeys(key).setBody(body);
                        if (tag != null) {
                            mb.setTag(tag);
                        }
                        Message m = mb.build();
                        String answer;
                        boolean good = false;
                        try {
                            SendReceipt r = producer.send(m);
                            long now = System.currentTimeMillis();
                            // broker, queue and offset stay null: the receipt's queue (the one the client
                            // picked from the proxy's route) is not where the message was stored (measured: 5,775
                            // of 6,000 receipts named another broker or queue than the delivery did)
                            answer = ",\"end_ms\":" + now + ",\"outcome\":\"ok\",\"status\":\"SEND_OK\",\"code\":null"
                                + ",\"remark\":null,\"error\":null,\"sent\":true,\"msg_id\":"
                                + Text.esc(r.getMessageId().toString()) + ",\"offset_msg_id\":null,\"broker\":null"
                                + ",\"queue_id\":null,\"queue_offset\":null,\"app_ok\":true";
                            good = true;
                        } catch (Throwable e) {
                            long now = System.currentTimeMillis();
                            boolean timeout = isTimeout(e);
                            Matcher mc = CODE.matcher(String.valueOf(e.getMessage()));
                            String code = !timeout && mc.find() ? mc.group(1) : "null";
                            // the broker's SYSTEM_BUSY relayed by the proxy: TOO_MANY_REQUESTS (42900) with the
                            // broker's remark, e.g. "[TIMEOUT_CLEAN_QUEUE]broker busy": recorded as the broker's
                            // code 2 and remark, so busy answers count alike on both paths
                            Matcher busy = BUSY.matcher(String.valueOf(e.getMessage()));
                            String remark = "null";
                            if (code.equals("42900") && busy.find()) {
                                code = "2";
                                remark = Text.esc(busy.group(1));
                            }
                            Throwable root = rootCause(e);
                            String text = e.getClass().getSimpleName() + ": " + e.getMessage()
                                + (root != e ? " (cause " + root.getClass().getSimpleName() + ": " + root.getMessage() + ")" : "");
                            answer = ",\"end_ms\":" + now + ",\"outcome\":\"" + (timeout ? "timeout" : "error")
                                + "\",\"status\":null,\"code\":" + code + ",\"remark\":" + remark + ",\"error\":"
                                + Text.esc(text) + ",\"sent\":" + !neverConnected(e) + ",\"msg_id\":null,\"offset_msg_id\":null,\"broker\":null"
                                + ",\"queue_id\":null,\"queue_offset\":null,\"app_ok\":false";
                        }
                        if (ledger) {
                            journal.append("{\"rec\":\"outcome\"," + intent + answer + "}\n", false);
                        }
                        if (good) {
                            ok.incrementAndGet();
                            break;
                        }
                        failed.incrementAndGet();
                    }
                }
            }, "grpc-load-" + t);
            th.start();
            workers.add(th);
        }
        long lastSync = System.currentTimeMillis();
        long lastSay = lastSync;
        while (workers.stream().anyMatch(Thread::isAlive)) {
            Thread.sleep(100);
            long now = System.currentTimeMillis();
            if (now - lastSync >= 1000) {
                journal.sync();
                lastSync = now;
            } else {
                journal.flush();
            }
            if (now - lastSay >= 5000) {
                System.err.printf("load: %.1fs/%.0fs attempts %d, accepted %d, failed %d%n", (now - t0) / 1000.0, duration,
                    ok.get() + failed.get(), ok.get(), failed.get());
                lastSay = now;
            }
        }
        journal.close();
        long t1 = System.currentTimeMillis();
        producer.close();
        String sum = "{\"start_s\": " + secs(t0) + ", \"end_s\": " + secs(t1) + ", \"client\": \"grpc\", "
            + "\"attempts\": " + (ok.get() + failed.get()) + ", \"accepted\": " + ok.get() + ", \"failed\": "
            + failed.get() + "}";
        if (summary != null) {
            Files.write(Paths.get(summary), (sum + "\n").getBytes(StandardCharsets.UTF_8));
        }
        System.out.println(sum);
        System.exit(0);
    }

    private static String secs(long ms) {
        return String.format(java.util.Locale.ROOT, "%.3f", ms / 1000.0);
    }

    private static Throwable rootCause(Throwable e) {
        Throwable c = e;
        while (c.getCause() != null && c.getCause() != c) {
            c = c.getCause();
        }
        return c;
    }

    /**
     * The call failed because no connection to the proxy could be made (connection refused: gRPC fails
     * an RPC fast while its channel cannot connect, with the connect error as the status's cause), so
     * its request never left: the ledger's sent false. Any other failure may have reached the proxy.
     */
    private static boolean neverConnected(Throwable e) {
        for (Throwable c = e; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (c instanceof java.net.ConnectException) {
                return true;
            }
        }
        return false;
    }

    private static boolean isTimeout(Throwable e) {
        for (Throwable c = e; c != null; c = c.getCause()) {
            String n = c.getClass().getName();
            String msg = String.valueOf(c.getMessage());
            if (c instanceof java.util.concurrent.TimeoutException || n.endsWith("ProxyTimeoutException")
                || msg.contains("DEADLINE_EXCEEDED")) {
                return true;
            }
        }
        return false;
    }

    /** The self-verifying body (rmqchaos/ledger/body.py encode): rmqc1|crc|producer|seq|key\n + filler, size bytes. */
    static byte[] body(String key, String producerId, long seq, byte[] filler, int size) {
        byte[] head = (producerId + "|" + seq + "|" + key + "\n").getBytes(StandardCharsets.UTF_8);
        int crcEnd = 6 + 9;
        int fill = Math.max(0, Math.min(filler.length, size - crcEnd - head.length));
        byte[] rest = new byte[head.length + fill];
        System.arraycopy(head, 0, rest, 0, head.length);
        System.arraycopy(filler, 0, rest, head.length, fill);
        CRC32 crc = new CRC32();
        crc.update(rest, 0, rest.length);
        byte[] pre = String.format("rmqc1|%08x|", crc.getValue()).getBytes(StandardCharsets.US_ASCII);
        byte[] b = new byte[pre.length + rest.length];
        System.arraycopy(pre, 0, b, 0, pre.length);
        System.arraycopy(rest, 0, b, pre.length, rest.length);
        return b;
    }

    private static byte[] filler(int size) {
        byte[] f = new byte[Math.max(0, size)];
        long x = 0x9E3779B97F4A7C15L;
        for (int i = 0; i < f.length; i++) { // printable, not compressible by accident
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            f[i] = (byte) ('a' + (int) ((x >>> 33) % 26));
        }
        return f;
    }
}
