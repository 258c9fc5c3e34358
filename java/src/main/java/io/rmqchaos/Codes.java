package io.rmqchaos;

import java.lang.reflect.Method;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

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

    /** Calls setter `name(int)` of `target` if its class has one (a client setting of some versions only). */
    static boolean set(Object target, String name, int value) {
        try {
            target.getClass().getMethod(name, int.class).invoke(target, value);
            return true;
        } catch (ReflectiveOperationException e) {
            return false;
        }
    }

    /** A no-argument getter by name (a pull header's getTopic, getQueueId, ...; a message's getBrokerName), or null. */
    static Object field(Object header, String getter) {
        if (header == null) {
            return null;
        }
        // looked up once per class and getter (a delivery asks for its broker name)
        Method m = GETTERS.computeIfAbsent(header.getClass().getName() + "#" + getter, k -> {
            try {
                return header.getClass().getMethod(getter);
            } catch (NoSuchMethodException e) {
                return NONE;
            }
        });
        try {
            return m == NONE ? null : m.invoke(header);
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }

    private static final Map<String, Method> GETTERS = new ConcurrentHashMap<>();
    private static final Method NONE;

    static {
        try {
            NONE = Object.class.getMethod("hashCode");
        } catch (NoSuchMethodException e) {
            throw new ExceptionInInitializerError(e);
        }
    }
}
