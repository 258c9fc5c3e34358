package io.rmqchaos;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.selector.SelectMessageQueueByHash;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The Java side of `rmqchaos bench producer --mode ordered|transactional`: the real client's own way
 * to send an ordered message (send with SelectMessageQueueByHash and a sharding key) or a transactional
 * one (TransactionMQProducer.sendMessageInTransaction, the local transaction committing at once),
 * --count messages over --concurrency threads, each sending one after another, as the platform's
 * Python side does. Each thread owns --keys sharding keys and sends them in turn. Prints one JSON line:
 * {"acked": n, "attempts": n}. (Normal sends are measured against RocketMQ's benchmark Producer.)
 */
public final class SendBench {
    private static String arg(String[] a, String name, String def) {
        return Text.arg(a, name, def);
    }

    public static void main(String[] args) throws Exception {
        final String mode = arg(args, "--mode", "ordered");
        final String topic = arg(args, "--topic", "RMQCHAOS_BENCH");
        final int count = Integer.parseInt(arg(args, "--count", "10000"));
        final int size = Integer.parseInt(arg(args, "--size", "1024"));
        final int conc = Integer.parseInt(arg(args, "--concurrency", "32"));
        final int keys = Integer.parseInt(arg(args, "--keys", "4"));
        final int timeoutMs = Integer.parseInt(arg(args, "--timeout-ms", "3000"));
        final DefaultMQProducer p;
        if (mode.equals("transactional")) {
            TransactionMQProducer t = new TransactionMQProducer("rmqchaos_bench_txn");
            t.setTransactionListener(new TransactionListener() {
                @Override
                public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                    return LocalTransactionState.COMMIT_MESSAGE;
                }

                @Override
                public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                    return LocalTransactionState.COMMIT_MESSAGE;
                }
            });
            p = t;
        } else if (mode.equals("ordered")) {
            p = new DefaultMQProducer("rmqchaos_bench_order");
        } else {
            throw new IllegalArgumentException("--mode must be ordered or transactional, not " + mode);
        }
        p.setNamesrvAddr(arg(args, "--namesrv", "127.0.0.1:9876"));
        p.setSendMsgTimeout(timeoutMs);
        p.start();
        final byte[] body = new byte[size];
        java.util.Arrays.fill(body, (byte) 'x');
        final AtomicLong acked = new AtomicLong(), attempts = new AtomicLong();
        final SelectMessageQueueByHash byHash = new SelectMessageQueueByHash();
        ExecutorService pool = Executors.newFixedThreadPool(conc);
        for (int w = 0; w < conc; w++) {
            final int worker = w;
            final int share = count / conc + (w < count % conc ? 1 : 0);
            pool.execute(() -> {
                for (int i = 0; i < share; i++) {
                    String shard = "b" + worker + "-k" + (i % keys);
                    Message m = new Message(topic, null, shard + "~" + i, body);
                    attempts.incrementAndGet();
                    try {
                        SendResult r = mode.equals("transactional")
                            ? p.sendMessageInTransaction(m, null)
                            : p.send(m, byHash, shard);
                        if (r.getSendStatus() == SendStatus.SEND_OK) {
                            acked.incrementAndGet();
                        }
                    } catch (Exception e) {
                        // a failed attempt: counted in attempts, not in acked
                    }
                }
            });
        }
        pool.shutdown();
        pool.awaitTermination(1, TimeUnit.HOURS);
        p.shutdown();
        System.out.println("{\"acked\":" + acked.get() + ",\"attempts\":" + attempts.get() + "}");
        System.exit(0);
    }
}
