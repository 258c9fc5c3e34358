package io.rmqchaos;

import java.util.Collections;
import java.util.Map;
import java.util.TreeMap;

import apache.rocketmq.v2.Code;
import apache.rocketmq.v2.ReceiveMessageRequest;
import apache.rocketmq.v2.ReceiveMessageResponse;
import org.apache.rocketmq.shaded.io.grpc.CallOptions;
import org.apache.rocketmq.shaded.io.grpc.Channel;
import org.apache.rocketmq.shaded.io.grpc.ClientCall;
import org.apache.rocketmq.shaded.io.grpc.ClientInterceptor;
import org.apache.rocketmq.shaded.io.grpc.ForwardingClientCall;
import org.apache.rocketmq.shaded.io.grpc.ForwardingClientCallListener;
import org.apache.rocketmq.shaded.io.grpc.InternalGlobalInterceptors;
import org.apache.rocketmq.shaded.io.grpc.Metadata;
import org.apache.rocketmq.shaded.io.grpc.MethodDescriptor;
import org.apache.rocketmq.shaded.io.grpc.Status;

/**
 * Which brokers behind the proxy serve a POP consumer's receives (SimpleConsumer and PushConsumer
 * alike), into its status file (ServingStatus, keyed by broker name): a gRPC interceptor on every
 * ReceiveMessage call of the client, installed as the client's shaded gRPC's global interceptor
 * before the client opens its first channel.
 *
 * What a receive tells (read in rocketmq-clients java 5.2.0 and the proxy 5.5.0): the request names
 * the broker the client asks (its message queue: the client takes it round robin from the route the
 * proxy gave it, masters only). The proxy pops from that broker whenever its own route lists it
 * (ReceiveMessageActivity.ReceiveMessageQueueSelector: getQueueByBrokerName), and from another one
 * it picks otherwise (selectOne). A message says which broker popped it: its receipt handle's 6th
 * field (ExtraInfoUtil's brokerName, written by that broker). "No new message" (Code
 * MESSAGE_NOT_FOUND: the broker's NO_NEW_MSG or POLLING_NOT_FOUND, or FOUND with none left after the
 * proxy's filter) names no broker. So, per receive:
 *  - answered with messages: served by each broker its messages' handles name ("messages"), and,
 *    when that is not the broker it asked, "redirected" counted on the one asked;
 *  - answered "no new message": served by the broker it asked ("no_new_message");
 *  - answered with another code: refused by the broker it asked, by the code's number (5 digits);
 *    no answer (the call failed): refused by the gRPC status's name (UNAVAILABLE, DEADLINE_EXCEEDED).
 * Nothing here may disturb the call: any error is swallowed.
 */
final class PopServing implements ClientInterceptor {
    private static final String RECEIVE = "/ReceiveMessage";
    /** whether any call of the client passed this interceptor (its gRPC applies global interceptors) */
    private static volatile boolean intercepted;
    private static volatile boolean installed;

    private final ServingStatus status;

    private PopServing(ServingStatus status) {
        this.status = status;
    }

    /** Install the interceptor; when the client's gRPC has no global interceptors, say so in the status. */
    static void install(ServingStatus status) {
        try {
            InternalGlobalInterceptors.setInterceptorsTracers(
                Collections.<ClientInterceptor>singletonList(new PopServing(status)),
                Collections.emptyList(), Collections.emptyList());
            installed = true;
        } catch (Throwable e) { // a client whose shaded gRPC predates global interceptors (1.50 has them)
            status.unwatched("this rocketmq-client-java's gRPC has no global interceptors to watch receives with ("
                + e.getClass().getSimpleName() + ")");
        }
    }

    /** Once the client has started (its route requests done): a gRPC that took the interceptor but does
     * not apply it to its channels watches nothing; the status says so. */
    static void checkApplied(ServingStatus status) {
        if (installed && !intercepted) {
            status.unwatched("this rocketmq-client-java's gRPC does not apply global interceptors to its calls: "
                + "its receives cannot be watched");
        }
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
        intercepted = true;
        ClientCall<Q, R> call = next.newCall(method, options);
        if (!method.getFullMethodName().endsWith(RECEIVE)) {
            return call;
        }
        final Receive r = new Receive();
        return new ForwardingClientCall.SimpleForwardingClientCall<Q, R>(call) {
            @Override
            public void start(Listener<R> listener, Metadata headers) {
                super.start(new ForwardingClientCallListener.SimpleForwardingClientCallListener<R>(listener) {
                    @Override
                    public void onMessage(R message) {
                        r.response(message);
                        super.onMessage(message);
                    }

                    @Override
                    public void onClose(Status s, Metadata trailers) {
                        r.closed(s);
                        super.onClose(s, trailers);
                    }
                }, headers);
            }

            @Override
            public void sendMessage(Q message) {
                r.request(message);
                super.sendMessage(message);
            }
        };
    }

    /** One receive call's request and answers. */
    private final class Receive {
        private volatile String asked;
        private int code = -1; // the answer's Code number (-1: no status came)
        private final Map<String, Integer> popped = new TreeMap<>();

        void request(Object m) {
            try {
                if (m instanceof ReceiveMessageRequest) {
                    asked = ((ReceiveMessageRequest) m).getMessageQueue().getBroker().getName();
                }
            } catch (Throwable ignored) {
            }
        }

        synchronized void response(Object m) {
            try {
                if (!(m instanceof ReceiveMessageResponse)) {
                    return;
                }
                ReceiveMessageResponse resp = (ReceiveMessageResponse) m;
                if (resp.hasStatus()) {
                    code = resp.getStatus().getCodeValue();
                } else if (resp.hasMessage()) {
                    String[] h = resp.getMessage().getSystemProperties().getReceiptHandle().split(" ");
                    if (h.length >= 8 && !h[5].isEmpty()) {
                        popped.merge(h[5], 1, Integer::sum);
                    }
                }
            } catch (Throwable ignored) {
            }
        }

        synchronized void closed(Status s) {
            try {
                String a = asked;
                if (!popped.isEmpty()) {
                    for (String b : popped.keySet()) {
                        status.served(b);
                        status.count(b, "messages");
                    }
                    if (a != null && !popped.containsKey(a)) {
                        status.count(a, "redirected");
                    }
                } else if (code == Code.MESSAGE_NOT_FOUND_VALUE) {
                    status.served(a);
                    status.count(a, "no_new_message");
                } else if (code >= 0 && code != Code.OK_VALUE) {
                    status.refused(a, String.valueOf(code));
                } else if (!s.isOk()) {
                    status.refused(a, s.getCode().name());
                }
            } catch (Throwable ignored) {
            }
        }
    }
}
