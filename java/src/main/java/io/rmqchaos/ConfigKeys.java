package io.rmqchaos;

import java.lang.reflect.Method;
import java.util.Map;
import java.util.TreeMap;

/**
 * Prints, as JSON, every key a broker.conf / namesrv properties file can set, with its type.
 * Uses exactly the rule of MixAll.properties2Object: a public setter named set<Key> whose first
 * parameter is int/long/double/float/boolean (or boxed) or String. The scenario validator reads
 * this so that a misspelt broker.conf key is an error, not silently ignored by the broker.
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
                if (type != null) {
                    out.put(mn.substring(3, 4).toLowerCase() + mn.substring(4), type);
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

    private static String kind(String simpleName) {
        switch (simpleName) {
            case "int": case "Integer": case "long": case "Long": return "int";
            case "double": case "Double": case "float": case "Float": return "float";
            case "boolean": case "Boolean": return "bool";
            case "String": return "str";
            default: return null;
        }
    }
}
