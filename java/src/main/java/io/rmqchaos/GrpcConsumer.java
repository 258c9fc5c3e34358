package io.rmqchaos;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.java.message.MessageViewImpl;

/**
 * The receive witness through the proxy: the RocketMQ 5.x Java client's SimpleConsumer (receive, then
 * optionally changeInvisibleDuration, then ack, each answer recorded) or PushConsumer, writing the
 * receive ledger in its one schema (rmqchaos/ledger/schema.py RECEIVE_FIELDS), one line per delivery, written
 * once the delivery's ack has been answered (SimpleConsumer) or its listener returned (PushConsumer).
 *
 * POP's fields: delivery_attempt (the proxy's count, 1 the first time), receipt_handle, ack (ok: the
 * proxy answered OK; error: it answered otherwise, see ack_error; skipped: not acked on purpose, e.g.
 * --mode ack_first_of_batch; null: acked by the client itself, the PushConsumer), ack_ms, and change
 * (the changeInvisibleDuration's answer, when --change-invisible-ms asks for one before the ack).
 * broker, queue_id and queue_offset are the stored copy's, from the receipt handle (the client's own queue of a
 * delivery is the one its receive asked); topic names the POP retry topic for a revived message.
 * store_ms is null: the 5.x client does not expose the store time; served_by is null: the proxy fetched it.
 *
 * --serving FILE: which brokers behind the proxy serve its receives, in the status file the remoting
 * consumer writes too (ServingStatus, keyed by broker name; PopServing says how a receive is read).
 *
 * Stop: SIGTERM; the hook stops receiving, closes the client, flushes and fsyncs the output, and prints
 * {"deliveries": N} on stdout (the platform's sign that it stopped cleanly).
 */
public final class GrpcConsumer {
    private GrpcConsumer() {
    }

    public static void main(String[] a) {
        Text.runOrExit(a, GrpcConsumer::run);
    }

    private static void run(String[] a) throws Exception {
        if (a.length == 0 || a[0].equals("--help")) {
            System.out.println("usage: GrpcConsumer --endpoints H:P --group G --topic T [--topic T2 ...] --out FILE "
                + "[--kind simple|push] [--mode all|ack_first_of_batch] [--batch-size N] [--invisible-ms MS] "
                + "[--await-ms MS] [--change-invisible-ms MS] [--delay-ms MS] [--last-ack-delay-ms MS] [--threads N] [--duration S] "
                + "[--consumer-id ID] [--run-id ID] [--serving FILE]");
            return;
        }
        final String endpoints = Text.arg(a, "--endpoints", null);
        final String group = Text.arg(a, "--group", null);
        final List<String> topics = Text.args(a, "--topic");
        final String out = Text.arg(a, "--out", null);
        if (endpoints == null || group == null || topics.isEmpty() || out == null) {
            System.err.println("error: --endpoints, --group, --topic and --out are required");
            System.exit(2);
        }
        final String kind = Text.arg(a, "--kind", "simple");
        final String mode = Text.arg(a, "--mode", "all");
        final int batch = Integer.parseInt(Text.arg(a, "--batch-size", "16"));
        final long invisibleMs = Long.parseLong(Text.arg(a, "--invisible-ms", "30000"));
        final long awaitMs = Long.parseLong(Text.arg(a, "--await-ms", "5000")); // the proxy takes 5-20 s
        final long changeMs = Long.parseLong(Text.arg(a, "--change-invisible-ms", "0"));
        final long delayMs = Long.parseLong(Text.arg(a, "--delay-ms", "0"));
        // the last message of each receive acked this much later, the others at once (apache/rocketmq#8835:
        // a checkpoint put to the store from the broker's buffer before the last ack); its line then
        final long lastAckDelayMs = Long.parseLong(Text.arg(a, "--last-ack-delay-ms", "0"));
        final int threads = Integer.parseInt(Text.arg(a, "--threads", "4"));
        final double duration = Double.parseDouble(Text.arg(a, "--duration", "600"));
        final String consumerId = Text.arg(a, "--consumer-id", "c0");
        final String runId = Text.arg(a, "--run-id", "");
        final String servingFile = Text.arg(a, "--serving", null);
        if (!kind.equals("simple") && !kind.equals("push")) {
            System.err.println("error: --kind must be simple or push, not " + kind);
            System.exit(2);
        }

        final Journal journal = new Journal(out);
        // before the client opens its first channel: the interceptor is its gRPC's global one
        final ServingStatus serving = servingFile == null ? null
            : new ServingStatus(Paths.get(servingFile), group, consumerId, "broker_name");
        if (serving != null) {
            PopServing.install(serving);
            serving.started(); // the client starts (and a PushConsumer receives) as it is built, below
            serving.write();
        }
        final AtomicLong deliveries = new AtomicLong();
        final AtomicBoolean running = new AtomicBoolean(true);
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfiguration conf = ClientConfiguration.newBuilder().setEndpoints(endpoints).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(3)).build();
        Map<String, FilterExpression> subs = new HashMap<>();
        for (String t : topics) {
            subs.put(t, FilterExpression.SUB_ALL);
        }

        final List<Thread> receivers = new ArrayList<>();
        final ScheduledExecutorService later = Executors.newSingleThreadScheduledExecutor();
        final Map<String, Long> refusals = new java.util.concurrent.ConcurrentHashMap<>();
        final SimpleConsumer simple;
        final PushConsumer push;
        if (kind.equals("simple")) {
            simple = provider.newSimpleConsumerBuilder().setClientConfiguration(conf).setConsumerGroup(group)
                .setSubscriptionExpressions(subs).setAwaitDuration(Duration.ofMillis(awaitMs)).build();
            push = null;
            for (int t = 0; t < threads; t++) {
                Thread th = new Thread(() -> {
                    while (running.get()) {
                        List<MessageView> got;
                        try {
                            got = simple.receive(batch, Duration.ofMillis(invisibleMs));
                        } catch (Throwable e) { // no message (NotFound), a proxy away: try again shortly
                            boolean none = e.getClass().getSimpleName().equals("NotFoundException");
                            if (!none) { // said on stderr (the consumer's log): the first of each kind, then every 100th
                                String kindOf = e.getClass().getSimpleName() + ": " + e.getMessage();
                                long n = refusals.merge(kindOf, 1L, Long::sum);
                                if (n == 1 || n % 100 == 0) {
                                    System.err.println("receive failed (" + n + " so far): " + kindOf);
                                }
                            }
                            sleep(none ? 0 : 200);
                            continue;
                        }
                        long receiveMs = System.currentTimeMillis();
                        for (int i = 0; i < got.size(); i++) {
                            MessageView m = got.get(i);
                            if (delayMs > 0) {
                                sleep(delayMs);
                            }
                            String change = null;
                            if (changeMs > 0) {
                                try {
                                    simple.changeInvisibleDuration(m, Duration.ofMillis(changeMs));
                                    change = "ok";
                                } catch (Throwable e) {
                                    change = "error: " + e.getMessage();
                                }
                            }
                            if (lastAckDelayMs > 0 && i == got.size() - 1 && got.size() > 1) {
                                final String chg = change;
                                final int size = got.size();
                                final int idx = i;
                                later.schedule(() -> {
                                    ackAndRecord(simple, m, journal, group, runId, consumerId, size, idx, receiveMs, chg);
                                    deliveries.incrementAndGet();
                                }, lastAckDelayMs, TimeUnit.MILLISECONDS);
                                continue;
                            }
                            String ack;
                            String ackError = null;
                            long ackMs;
                            if (mode.equals("ack_first_of_batch") && i > 0) {
                                ack = "skipped";
                                ackMs = System.currentTimeMillis();
                            } else {
                                try {
                                    simple.ack(m);
                                    ack = "ok";
                                } catch (Throwable e) {
                                    ack = "error";
                                    ackError = e.getClass().getSimpleName() + ": " + e.getMessage();
                                }
                                ackMs = System.currentTimeMillis();
                            }
                            // written once the ack is answered, before the next: a SIGKILL can fall between the
                            // answer and this write (microseconds), so a killed gRPC consumer is not a fault yet
                            StringBuilder sb = new StringBuilder(512);
                            line(sb, m, group, runId, consumerId, got.size(), i, receiveMs, ack, ackMs, ackError, change);
                            journal.append(sb.toString(), true);
                            deliveries.incrementAndGet();
                        }
                    }
                }, "grpc-receive-" + t);
                receivers.add(th);
            }
        } else {
            simple = null;
            push = provider.newPushConsumerBuilder().setClientConfiguration(conf).setConsumerGroup(group)
                .setSubscriptionExpressions(subs).setConsumptionThreadCount(threads)
                .setMessageListener(m -> {
                    long receiveMs = System.currentTimeMillis();
                    if (delayMs > 0) {
                        sleep(delayMs);
                    }
                    StringBuilder sb = new StringBuilder(400);
                    line(sb, m, group, runId, consumerId, 1, 0, receiveMs, null, System.currentTimeMillis(), null, null);
                    if (!journal.append(sb.toString(), true)) {
                        return ConsumeResult.FAILURE; // not recorded: not acknowledged
                    }
                    deliveries.incrementAndGet();
                    return ConsumeResult.SUCCESS;
                }).build();
        }

        if (serving != null) {
            PopServing.checkApplied(serving);
        }

        final CountDownLatch stopped = new CountDownLatch(1);
        final long start = System.currentTimeMillis();
        Runnable stop = () -> {
            running.set(false);
            for (Thread th : receivers) {
                try {
                    th.join(10_000);
                } catch (InterruptedException ignored) {
                    Thread.currentThread().interrupt();
                }
            }
            later.shutdown(); // the late acks already scheduled still run
            try {
                later.awaitTermination(lastAckDelayMs + 10_000, TimeUnit.MILLISECONDS);
            } catch (InterruptedException ignored) {
                Thread.currentThread().interrupt();
            }
            try {
                if (simple != null) {
                    simple.close();
                }
                if (push != null) {
                    push.close();
                }
            } catch (IOException ignored) {
            }
            if (serving != null) {
                try {
                    serving.write();
                } catch (IOException ignored) {
                }
            }
            journal.close();
            System.out.println("{\"deliveries\":" + deliveries.get() + ",\"elapsed_ms\":"
                + (System.currentTimeMillis() - start) + "}");
            System.out.flush();
            stopped.countDown();
        };
        Thread hook = new Thread(stop, "rmqchaos-grpc-consumer-stop");
        Runtime.getRuntime().addShutdownHook(hook);
        for (Thread th : receivers) {
            th.start();
        }
        System.err.println("consumer " + consumerId + " started: group " + group + " topics " + topics + " mode " + mode
            + " kind " + kind + " via " + endpoints);
        long lastSync = System.currentTimeMillis();
        while (System.currentTimeMillis() - start < duration * 1000) {
            Thread.sleep(100);
            long now = System.currentTimeMillis();
            if (serving != null) {
                serving.maybeWrite(now);
            }
            if (now - lastSync >= 1000) { // bounded loss window on a crash: flush + fsync every second
                journal.sync();
                lastSync = now;
            }
        }
        Runtime.getRuntime().removeShutdownHook(hook);
        stop.run();
        stopped.await();
        System.exit(0);
    }

    /** The ack of a delivery acked apart (--last-ack-delay-ms), and its ledger line. */
    private static void ackAndRecord(SimpleConsumer simple, MessageView m, Journal journal, String group, String runId,
                                     String consumerId, int size, int idx, long receiveMs, String change) {
        String ack = "ok";
        String ackError = null;
        try {
            simple.ack(m);
        } catch (Throwable e) {
            ack = "error";
            ackError = e.getClass().getSimpleName() + ": " + e.getMessage();
        }
        StringBuilder sb = new StringBuilder(512);
        line(sb, m, group, runId, consumerId, size, idx, receiveMs, ack, System.currentTimeMillis(), ackError, change);
        journal.append(sb.toString(), true);
    }

    private static void line(StringBuilder sb, MessageView m, String group, String runId, String consumerId, int batchSize, int idx,
                             long receiveMs, String ack, long ackMs, String ackError, String change) {
        // where the message is stored, from its receipt handle (ExtraInfoUtil: ckQueueOffset popTime
        // invisibleTime reviveQid topicType brokerName queueId queueOffset ...): the client's own
        // MessageQueueImpl of a delivery is the queue its receive asked, not the one the proxy popped from
        String broker = null;
        String queue = "null";
        String offset = "null";
        String handle = m instanceof MessageViewImpl ? ((MessageViewImpl) m).getReceiptHandle() : null;
        String topic = m.getTopic();
        String[] h = handle == null ? new String[0] : handle.split(" ");
        if (h.length >= 8) {
            broker = h[5];
            queue = h[6];
            offset = h[7];
            if (h[4].equals("1")) { // a revived message, read from the POP retry topic (KeyBuilder)
                topic = "%RETRY%" + group + "_" + m.getTopic();
            } else if (h[4].equals("2")) {
                topic = "%RETRY%" + group + "+" + m.getTopic();
            }
        }
        ByteBuffer bb = m.getBody();
        byte[] body = new byte[bb.remaining()];
        bb.get(body);
        String[] chk = Text.checkBody(body);
        String key = m.getKeys().isEmpty() ? null : m.getKeys().iterator().next();
        sb.append("{\"run_id\":").append(Text.esc(runId))
            .append(",\"key\":").append(Text.esc(key))
            .append(",\"msg_id\":").append(Text.esc(m.getMessageId().toString()))
            .append(",\"offset_msg_id\":null")
            .append(",\"topic\":").append(Text.esc(topic))
            .append(",\"origin_topic\":").append(Text.esc(m.getTopic()))
            .append(",\"broker\":").append(Text.esc(broker))
            .append(",\"queue_id\":").append(queue)
            .append(",\"queue_offset\":").append(offset)
            .append(",\"reconsume_times\":").append(Math.max(0, m.getDeliveryAttempt() - 1))
            .append(",\"consumer_id\":").append(Text.esc(consumerId))
            .append(",\"batch_size\":").append(batchSize)
            .append(",\"batch_index\":").append(idx)
            .append(",\"store_ms\":null")
            .append(",\"receive_ms\":").append(receiveMs)
            .append(",\"body_key\":").append(Text.esc(chk[0]))
            .append(",\"body_ok\":").append(chk[1] == null ? "null" : chk[1])
            .append(",\"served_by\":null")
            .append(",\"delivery_attempt\":").append(m.getDeliveryAttempt())
            .append(",\"receipt_handle\":").append(Text.esc(handle))
            .append(",\"ack\":").append(Text.esc(ack))
            .append(",\"ack_ms\":").append(ack == null ? "null" : String.valueOf(ackMs))
            .append(",\"ack_error\":").append(Text.esc(ackError))
            .append(",\"change\":").append(Text.esc(change))
            .append("}\n");
    }

    private static void sleep(long ms) {
        if (ms <= 0) {
            return;
        }
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
