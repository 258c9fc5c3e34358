package io.rmqchaos;

import java.lang.reflect.Method;
import java.util.Map;
import java.util.TreeMap;

/**
 * Prints, as JSON, every key a broker.conf / namesrv properties file can set, with its type.
 * Uses exactly the rule of MixAll.properties2Object: a public setter named set<Key> whose first
 * parameter is int/long/double/float/boolean (or boxed) or String. The scenario validator reads
 * this so that a misspelt broker.conf key is an error, not silently ignored by the broker.
 *
 * Types: "int" (32 bit), "long", "float", "bool", "str", and "enum:A,B,C" for a String setter
 * whose getter returns an enum (brokerRole, flushDiskType, ...): the broker's String setter calls
 * valueOf, and properties2Object swallows its exception, so a misspelt value would leave the
 * default in place silently; the validator checks the value against the constants instead.
 */
public final class ConfigKeys {
    private static final String[] BROKER = {
        "org.apache.rocketmq.common.BrokerConfig",
        "org.apache.rocketmq.remoting.netty.NettyServerConfig",
        "org.apache.rocketmq.remoting.netty.NettyClientConfig",
        "org.apache.rocketmq.store.config.MessageStoreConfig",
        "org.apache.rocketmq.auth.config.AuthConfig",
    };
    private static final String[] NAMESRV = {
        "org.apache.rocketmq.common.namesrv.NamesrvConfig",
        "org.apache.rocketmq.remoting.netty.NettyServerConfig",
        "org.apache.rocketmq.remoting.netty.NettyClientConfig",
    };

    public static void main(String[] args) throws Exception {
        System.out.print("{\"broker\":" + keys(BROKER) + ",\"namesrv\":" + keys(NAMESRV) + "}\n");
    }

    private static String keys(String[] classes) throws Exception {
        Map<String, String> out = new TreeMap<>();
        for (String cn : classes) {
            Class<?> c;
            try {
                c = Class.forName(cn);
            } catch (ClassNotFoundException e) {
                continue; // older versions lack e.g. AuthConfig
            }
            for (Method m : c.getMethods()) {
                String mn = m.getName();
                if (!mn.startsWith("set") || mn.length() < 4 || m.getParameterTypes().length == 0) {
                    continue;
                }
                String type = kind(m.getParameterTypes()[0].getSimpleName());
                if (type == null) {
                    continue;
                }
                String key = mn.substring(3, 4).toLowerCase() + mn.substring(4);
                if (type.equals("str")) {
                    String constants = enumConstants(c, mn.substring(3));
                    if (constants != null) {
                        type = "enum:" + constants;
                    }
                }
                if (!out.containsKey(key) || out.get(key).equals("str")) {
                    out.put(key, type);
                }
            }
        }
        StringBuilder sb = new StringBuilder("{");
        for (Map.Entry<String, String> e : out.entrySet()) {
            if (sb.length() > 1) {
                sb.append(',');
            }
            sb.append('"').append(e.getKey()).append("\":\"").append(e.getValue()).append('"');
        }
        return sb.append('}').toString();
    }

    /** "A,B,C" when get<Name>() returns an enum, else null. */
    private static String enumConstants(Class<?> c, String name) {
        try {
            Class<?> t = c.getMethod("get" + name).getReturnType();
            if (!t.isEnum()) {
                return null;
            }
            StringBuilder sb = new StringBuilder();
            for (Object k : t.getEnumConstants()) {
                sb.append(sb.length() > 0 ? "," : "").append(((Enum<?>) k).name());
            }
            return sb.toString();
        } catch (NoSuchMethodException e) {
            return null;
        }
    }

    private static String kind(String simpleName) {
        switch (simpleName) {
            case "int": case "Integer": return "int";
            case "long": case "Long": return "long";
            case "double": case "Double": case "float": case "Float": return "float";
            case "boolean": case "Boolean": return "bool";
            case "String": return "str";
            default: return null;
        }
    }
}
