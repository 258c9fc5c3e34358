package io.rmqchaos;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.CRC32;

/**
 * What every program of the module shares and that needs no RocketMQ class: argument lookup, a JSON
 * string, the self-verifying body's check. The gRPC programs (GrpcProducer, GrpcConsumer) run without
 * the remoting client on their classpath, so these cannot live in Consumer.
 */
final class Text {
    private Text() {
    }

    /** A program's body. */
    interface Body {
        void run(String[] a) throws Exception;
    }

    /**
     * Runs a gRPC program's body; a failure ends the JVM with the reason and exit 1 (the 5.x client's own
     * threads would keep it alive after main died).
     */
    static void runOrExit(String[] a, Body body) {
        try {
            body.run(a);
        } catch (Throwable e) {
            System.err.println("error: " + e);
            e.printStackTrace();
            System.exit(1);
        }
    }

    static String arg(String[] a, String name, String def) {
        for (int i = 0; i < a.length - 1; i++) {
            if (a[i].equals(name)) {
                return a[i + 1];
            }
        }
        return def;
    }

    static List<String> args(String[] a, String name) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < a.length - 1; i++) {
            if (a[i].equals(name)) {
                out.add(a[i + 1]);
            }
        }
        return out;
    }

    static String esc(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    private static final byte[] MAGIC = "rmqc1|".getBytes(StandardCharsets.US_ASCII);
    private static final int CRC_END = MAGIC.length + 9;

    /**
     * The self-verifying body (rmqchaos/ledger/body.py): {@code rmqc1|<crc32 hex>|<producer>|<seq>|<key>\n<payload>},
     * the CRC-32 over every byte after {@code rmqc1|<crc>|}. Returns {key or null, "true"/"false"/null}:
     * null when the body is not ours (no prefix), false when it is and does not check out.
     */
    static String[] checkBody(byte[] b) {
        if (b == null || b.length < MAGIC.length) {
            return new String[] {null, null};
        }
        for (int i = 0; i < MAGIC.length; i++) {
            if (b[i] != MAGIC[i]) {
                return new String[] {null, null};
            }
        }
        if (b.length < CRC_END || b[CRC_END - 1] != '|') {
            return new String[] {null, "false"};
        }
        long want;
        try {
            want = Long.parseLong(new String(b, MAGIC.length, 8, StandardCharsets.US_ASCII), 16);
        } catch (NumberFormatException e) {
            return new String[] {null, "false"};
        }
        CRC32 crc = new CRC32();
        crc.update(b, CRC_END, b.length - CRC_END);
        int nl = -1;
        for (int i = CRC_END; i < b.length; i++) {
            if (b[i] == '\n') {
                nl = i;
                break;
            }
        }
        String key = null;
        if (nl >= 0) {
            String[] f = new String(b, CRC_END, nl - CRC_END, StandardCharsets.UTF_8).split("\\|", 3);
            key = f.length == 3 ? f[2] : null;
        }
        return new String[] {key, String.valueOf(crc.getValue() == want && key != null)};
    }
}
