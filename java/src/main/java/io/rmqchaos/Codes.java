package io.rmqchaos;

import java.lang.reflect.Method;

/**
 * The remoting codes and pull-request fields the platform's Java programs read, without naming a class
 * that moved between the majors: RocketMQ 5.0 moved RequestCode, ResponseCode and the request headers
 * from org.apache.rocketmq.common.protocol to org.apache.rocketmq.remoting.protocol. The numbers are
 * the same (4.6.0, 4.9.7 and 5.5.0 sources), so one source builds against the jars of either major.
 */
final class Codes {
    static final int PULL_MESSAGE = 11; // RequestCode.PULL_MESSAGE
    static final int SUCCESS = 0; // ResponseCode.SUCCESS
    static final int PULL_NOT_FOUND = 19;
    static final int PULL_RETRY_IMMEDIATELY = 20;
    static final int SUBSCRIPTION_NOT_EXIST = 24;
    static final int SUBSCRIPTION_NOT_LATEST = 25;

    private Codes() {
    }

    /** A getter of a request header by name (PullMessageRequestHeader's getTopic, getQueueId, ...), or null. */
    static Object field(Object header, String getter) {
        if (header == null) {
            return null;
        }
        try {
            Method m = header.getClass().getMethod(getter);
            return m.invoke(header);
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }
}
