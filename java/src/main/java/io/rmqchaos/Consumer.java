package io.rmqchaos;

import java.io.IOException;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.WeakHashMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BiFunction;
import java.util.function.BiPredicate;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.hook.FilterMessageContext;
import org.apache.rocketmq.client.hook.FilterMessageHook;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

/**
 * The receive witness: a real DefaultMQPushConsumer that records every delivery as one JSON line
 * and acks according to a mode.
 *
 *   all                 CONSUME_SUCCESS for the whole batch (a normal application)
 *   ack_first_of_batch  CONSUME_SUCCESS with ackIndex 0: messages 2..n of each batch go back through
 *                       %RETRY%<group> (the batch-consumer SDK bug of incident 004)
 *
 * Stops after --duration seconds, or --idle seconds without a delivery, or on SIGTERM; it then
 * shuts the consumer down (persisting offsets) and fsyncs the output. Prints a JSON summary on stdout.
 */
public final class Consumer {
    /** The receive ledger's POP fields, which a remoting delivery does not have (GrpcConsumer writes them). */
    private static final String POP_NULLS = ",\"delivery_attempt\":null,\"receipt_handle\":null,\"ack\":null"
        + ",\"ack_ms\":null,\"ack_error\":null,\"change\":null";
    /**
     * Which node served each delivered message: the address of the pull that fetched it. The client's
     * RPC hook sees every pull response with its channel's remote address; the pull callback that
     * decodes that response runs next on the same thread (NettyRemotingClient.invokeImpl completes a
     * future whose hook stage precedes the callback's), and its filter hook sees the decoded
     * messages. The address passes between the two in a thread-local, used once, and only for
     * messages of the pulled queue within the pulled offsets; anything else is unknown (null). On 4.x,
     * whose client has no hook after an asynchronous answer, the pull last sent for the queue names it.
     */
    static final class ServedBy implements RPCHook, FilterMessageHook {
        private static final class Pull {
            final String topic;
            final int queueId;
            final long from;
            final long next;
            final String addr;
            final long sentMs = HostClock.now();

            Pull(String topic, int queueId, long from, long next, String addr) {
                this.topic = topic;
                this.queueId = queueId;
                this.from = from;
                this.next = next;
                this.addr = addr;
            }
        }

        private final ThreadLocal<Pull> last = new ThreadLocal<>();
        /** RocketMQ 4.x's client runs RPC hooks before an asynchronous request and never after its answer
         *  (NettyRemotingClient.invokeAsync): there, the last pull sent per queue ("topic@queueId"; the push
         *  consumer has one pull of a queue in flight at a time) names the address its messages came from. */
        private final Map<String, Pull> sent = new ConcurrentHashMap<>();
        /** Whether this client ran the hook after a pull's answer (5.x); until then refusals are unseen. */
        private volatile boolean answersSeen;
        /** 4.x: a pull resent to the same broker at the same offset sooner than this after the last was
         *  refused (the client resends one pullTimeDelayMillsWhenException, 3 s, later); a long-polled
         *  "no new message" comes back only after brokerSuspendMaxTimeMillis (15 s) or with messages. */
        static final long REPULL_REFUSED_MS = 8000;
        private final Map<MessageExt, String> served = Collections.synchronizedMap(new WeakHashMap<>());
        private final Serving serving; // every pull's answer, per broker (null: not asked for)

        ServedBy(Serving serving) {
            this.serving = serving;
        }

        @Override
        public void doBeforeRequest(String remoteAddr, RemotingCommand request) {
            if (request == null || request.getCode() != Codes.PULL_MESSAGE) {
                return;
            }
            Pull p = pulled(request, Long.MAX_VALUE, remoteAddr);
            if (p == null) {
                return;
            }
            Pull before = sent.put(p.topic + "@" + p.queueId, p);
            // 4.x cannot show the refusal itself (code 25 of the heartbeat race Serving describes, which
            // 4.6.0's client has too: tryLock in sendHeartbeatToAllBrokerWithLock), only its resend
            if (serving != null && !answersSeen && before != null && before.from == p.from
                && before.addr.equals(p.addr) && p.sentMs - before.sentMs < REPULL_REFUSED_MS) {
                serving.resent(p.addr);
            }
        }

        /** The pull a PULL_MESSAGE request asks for, its header read by name (its class moved in 5.0:
         *  Codes), answered up to `next`; null when the header lacks a field. */
        private static Pull pulled(RemotingCommand request, long next, String addr) {
            Object h = request.readCustomHeader();
            Object topic = Codes.field(h, "getTopic");
            Object queueId = Codes.field(h, "getQueueId");
            Object offset = Codes.field(h, "getQueueOffset");
            if (!(topic instanceof String) || !(queueId instanceof Integer) || !(offset instanceof Long)) {
                return null;
            }
            return new Pull((String) topic, (Integer) queueId, (Long) offset, next, addr);
        }

        @Override
        public void doAfterResponse(String remoteAddr, RemotingCommand request, RemotingCommand response) {
            if (request == null || request.getCode() != Codes.PULL_MESSAGE || response == null) {
                return;
            }
            answersSeen = true;
            if (serving != null) {
                serving.answered(remoteAddr, response.getCode());
            }
            if (response.getCode() != Codes.SUCCESS || response.getExtFields() == null) {
                return;
            }
            String next = response.getExtFields().get("nextBeginOffset");
            if (next == null) {
                return;
            }
            Pull p;
            try {
                p = pulled(request, Long.parseLong(next), remoteAddr);
            } catch (NumberFormatException ignored) {
                last.remove();
                return;
            }
            if (p != null) {
                last.set(p);
            }
        }

        @Override
        public String hookName() {
            return "rmqchaos-served-by";
        }

        @Override
        public void filterMessage(FilterMessageContext ctx) {
            Pull p = last.get();
            last.remove();
            if (ctx.getMsgList() == null || ctx.getMsgList().isEmpty()) {
                return;
            }
            if (p == null) { // 4.x: no hook after the answer; the pull sent for this queue, and it served
                MessageExt first = ctx.getMsgList().get(0);
                p = sent.get(first.getTopic() + "@" + first.getQueueId());
                if (p == null) {
                    return;
                }
                if (serving != null) {
                    serving.answered(p.addr, Codes.SUCCESS);
                }
            }
            for (MessageExt m : ctx.getMsgList()) {
                if (p.topic.equals(m.getTopic()) && p.queueId == m.getQueueId()
                    && p.from <= m.getQueueOffset() && m.getQueueOffset() < p.next) {
                    served.put(m, p.addr);
                }
            }
        }

        /** The address that served a message (null: not known). Kept while the message object lives: a
         *  batch the listener hands back for a local retry is the same objects, served by the same node. */
        String of(MessageExt m) {
            return served.get(m);
        }
    }

    /** The delivered message's broker name (MessageExt.getBrokerName, 4.9+), else its queue's. */
    static String brokerName(MessageExt m, MessageQueue mq) {
        Object b = Codes.field(m, "getBrokerName");
        return b instanceof String ? (String) b : (mq == null ? null : mq.getBrokerName());
    }

    public static void main(String[] a) throws Exception {
        if (a.length == 0 || a[0].equals("--help")) {
            System.out.println("usage: Consumer --namesrv H:P --group G --topic T [--topic T2 ...] --out FILE "
                + "[--mode all|ack_first_of_batch] [--listener concurrently|orderly] [--batch-size N] [--delay-ms MS] [--threads N] [--max-reconsume-times N] "
                + "[--poll-namesrv-ms MS] [--duration S] [--idle S] [--consumer-id ID] [--run-id ID] [--serving FILE] [--clock-offset-ms MS]");
            return;
        }
        final String namesrv = Text.arg(a, "--namesrv", "127.0.0.1:9876");
        final String group = Text.arg(a, "--group", null);
        final List<String> topics = Text.args(a, "--topic");
        final String out = Text.arg(a, "--out", null);
        final String mode = Text.arg(a, "--mode", "all");
        // orderly: MessageListenerOrderly, each queue consumed by one thread under the broker's queue lock
        final String listener = Text.arg(a, "--listener", "concurrently");
        final int batch = Integer.parseInt(Text.arg(a, "--batch-size", "1"));
        final long delayMs = Long.parseLong(Text.arg(a, "--delay-ms", "0"));
        final int threads = Integer.parseInt(Text.arg(a, "--threads", "8"));
        // redeliveries before a message goes to %DLQ%<group>; -1: the client's default (16)
        final int maxReconsume = Integer.parseInt(Text.arg(a, "--max-reconsume-times", "-1"));
        // how often the client asks namesrv for its topics' routes (pollNameServerInterval; 30 s by
        // default): a %RETRY% queue on a broker the first route did not list is consumed only after it
        final int pollNamesrvMs = Integer.parseInt(Text.arg(a, "--poll-namesrv-ms", "30000"));
        final double duration = Double.parseDouble(Text.arg(a, "--duration", "600"));
        final double idle = Double.parseDouble(Text.arg(a, "--idle", "0"));
        final String consumerId = Text.arg(a, "--consumer-id", "c0");
        final String runId = Text.arg(a, "--run-id", "");
        // the status file of which brokers serve this consumer's pulls (Serving); none without it
        final String servingFile = Text.arg(a, "--serving", null);
        // started under libfaketime at this offset (a clock of its own): its times stay the host's (HostClock)
        final String clockOffset = Text.arg(a, "--clock-offset-ms", null);
        if (clockOffset != null) {
            HostClock.underOwnClock(Long.parseLong(clockOffset));
        }
        if (group == null || topics.isEmpty() || out == null) {
            System.err.println("error: --group, --topic and --out are required");
            System.exit(2);
        }
        if (!mode.equals("all") && !mode.equals("ack_first_of_batch")) {
            System.err.println("error: --mode must be all or ack_first_of_batch, not " + mode);
            System.exit(2);
        }
        if (!listener.equals("concurrently") && !(listener.equals("orderly") && mode.equals("all"))) {
            System.err.println("error: --listener must be concurrently, or orderly with --mode all, not " + listener);
            System.exit(2);
        }
        final String retryTopic = MixAll.getRetryTopic(group);
        final Journal journal = new Journal(out);
        final AtomicLong deliveries = new AtomicLong();
        final AtomicLong lastDelivery = new AtomicLong(HostClock.now());

        final Serving serving = servingFile == null ? null : new Serving(Paths.get(servingFile), group, consumerId);
        final ServedBy servedBy = new ServedBy(serving);
        // (group, hook, strategy): the one constructor with a hook that 5.1.x and 5.5.x both have
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, servedBy, new AllocateMessageQueueAveragely());
        c.getDefaultMQPushConsumerImpl().registerFilterMessageHook(servedBy);
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(consumerId);
        c.setClientIP("127.0.0.1");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setConsumeMessageBatchMaxSize(batch);
        c.setConsumeThreadMin(threads);
        c.setConsumeThreadMax(threads);
        c.setMaxReconsumeTimes(maxReconsume);
        c.setPollNameServerInterval(pollNamesrvMs);
        // the witness must not die of a slow first answer: start() throws when the first route request
        // to namesrv takes over mqClientApiTimeout (3 s by default), seen on a replicated cluster's
        // namesrv while its ten JVMs start on two cores; pulls have their own timeouts
        if (!Codes.set(c, "setMqClientApiTimeout", 10_000)) { // 4.9+; 4.6.0's client has a fixed 3 s
            System.err.println("rmqchaos: this client cannot set mqClientApiTimeout (RocketMQ before 4.9): 3 s");
        }
        for (String t : topics) {
            c.subscribe(t, "*");
        }
        // one ledger line per delivery, the same for both listeners
        // mq: the queue the batch came from (its broker's name, where MessageExt has none: before 4.9)
        final BiFunction<List<MessageExt>, MessageQueue, String> lines = (msgs, mq) -> {
            long now = HostClock.now();
            String broker = msgs.isEmpty() ? null : brokerName(msgs.get(0), mq); // one queue's batch, one broker
            StringBuilder sb = new StringBuilder(256 * msgs.size());
            for (int idx = 0; idx < msgs.size(); idx++) {
                MessageExt m = msgs.get(idx);
                // resetRetryAndNamespace() has already put the original topic back; the RETRY_TOPIC
                // property tells that this delivery came through %RETRY%<group>.
                boolean viaRetry = m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC) != null;
                String offsetMsgId = m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : null;
                String[] body = Text.checkBody(m.getBody());
                sb.append("{\"run_id\":").append(Text.esc(runId))
                    .append(",\"key\":").append(Text.esc(m.getKeys()))
                    .append(",\"msg_id\":").append(Text.esc(m.getMsgId()))
                    .append(",\"offset_msg_id\":").append(Text.esc(offsetMsgId))
                    .append(",\"topic\":").append(Text.esc(viaRetry ? retryTopic : m.getTopic()))
                    .append(",\"origin_topic\":").append(Text.esc(m.getTopic()))
                    .append(",\"broker\":").append(Text.esc(broker))
                    .append(",\"queue_id\":").append(m.getQueueId())
                    .append(",\"queue_offset\":").append(m.getQueueOffset())
                    .append(",\"reconsume_times\":").append(m.getReconsumeTimes())
                    .append(",\"consumer_id\":").append(Text.esc(consumerId))
                    .append(",\"batch_size\":").append(msgs.size())
                    .append(",\"batch_index\":").append(idx)
                    .append(",\"store_ms\":").append(m.getStoreTimestamp())
                    .append(",\"receive_ms\":").append(now)
                    .append(",\"body_key\":").append(Text.esc(body[0]))
                    .append(",\"body_ok\":").append(body[1] == null ? "null" : body[1])
                    .append(",\"served_by\":").append(Text.esc(servedBy.of(m)))
                    .append(POP_NULLS)
                    .append("}\n");
            }
            return sb.toString();
        };
        // a batch recorded: its lines written, counted, then its processing time; false: not written.
        // Flushed to the OS before the listener acknowledges the batch: a SIGKILLed consumer's ledger
        // (the consumer_kill fault) holds every delivery it acknowledged (the page cache outlives it).
        final BiPredicate<List<MessageExt>, MessageQueue> record = (msgs, mq) -> {
            String text = lines.apply(msgs, mq);
            if (!journal.append(text, true)) {
                return false;
            }
            deliveries.addAndGet(msgs.size());
            lastDelivery.set(HostClock.now());
            if (delayMs > 0) {
                try {
                    Thread.sleep(delayMs * msgs.size());
                } catch (InterruptedException ignored) {
                    Thread.currentThread().interrupt();
                }
            }
            return true;
        };
        if (listener.equals("orderly")) {  // not recorded: the queue is suspended and read again
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> record.test(msgs, ctx.getMessageQueue())
                ? ConsumeOrderlyStatus.SUCCESS : ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT);
        } else c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            if (!record.test(msgs, ctx.getMessageQueue())) {
                return ConsumeConcurrentlyStatus.RECONSUME_LATER; // not recorded: not acked
            }
            if (mode.equals("ack_first_of_batch")) {
                ctx.setAckIndex(0);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });

        final CountDownLatch stopped = new CountDownLatch(1);
        final long start = HostClock.now();
        Runnable stop = () -> {
            c.shutdown(); // persists consumer offsets to the broker
            if (serving != null) {
                serving.close();
                try {
                    serving.write();
                } catch (IOException ignored) {
                }
            }
            journal.close();
            System.out.println("{\"deliveries\":" + deliveries.get() + ",\"elapsed_ms\":"
                + (HostClock.now() - start) + "}");
            System.out.flush();
            stopped.countDown();
        };
        Thread hook = new Thread(stop, "rmqchaos-consumer-stop");
        Runtime.getRuntime().addShutdownHook(hook);
        c.start();
        if (serving != null) {
            serving.started(c);
            serving.write();
        }
        System.err.println("consumer " + consumerId + " started: group " + group + " topics " + topics + " mode " + mode
            + " listener " + listener);

        long lastSync = HostClock.now();
        while (true) {
            Thread.sleep(100);
            long now = HostClock.now();
            if (serving != null) {
                serving.maybeWrite(now);
            }
            if (now - lastSync >= 1000) { // bounded loss window on a crash: flush + fsync every second
                journal.sync();
                lastSync = now;
            }
            if (now - start >= duration * 1000) {
                break;
            }
            if (idle > 0 && now - lastDelivery.get() >= idle * 1000) {
                break;
            }
        }
        Runtime.getRuntime().removeShutdownHook(hook);
        stop.run();
        stopped.await();
        System.exit(0);
    }
}
