package io.rmqchaos;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;

/**
 * A ledger journal written by a Java program (docs/ledgers.md): JSON lines appended through one
 * buffered writer under one lock. {@link #append} hands a record to the OS at once when asked (a
 * SIGKILLed writer's page cache keeps it); {@link #sync} flushes and fsyncs (every second, bounding what
 * a machine crash loses); {@link #close} does both, once. "-" writes nowhere (a benchmark without a ledger).
 */
final class Journal {
    private final FileOutputStream fos;
    private final Writer w;
    private final boolean on;

    Journal(String path) throws IOException {
        on = !path.equals("-");
        fos = new FileOutputStream(on ? path : "/dev/null", true);
        w = new OutputStreamWriter(fos, StandardCharsets.UTF_8);
    }

    boolean on() {
        return on;
    }

    /** Appends lines; with {@code toOs} the writer's buffer goes to the OS before it returns. False: not written. */
    synchronized boolean append(String lines, boolean toOs) {
        if (!on) {
            return true;
        }
        try {
            w.write(lines);
            if (toOs) {
                w.flush();
            }
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    synchronized void flush() throws IOException {
        if (on) {
            w.flush();
        }
    }

    synchronized void sync() throws IOException {
        if (on) { // /dev/null cannot be fsync'd
            w.flush();
            fos.getFD().sync();
        }
    }

    synchronized void close() {
        try {
            sync();
            w.close();
        } catch (IOException ignored) {
            // closing at exit: what was synced is kept
        }
    }
}
