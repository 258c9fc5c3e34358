package io.rmqchaos;

import java.util.ArrayList;
import java.util.List;

/**
 * The jvm_oom fault: loaded into a running broker through the Attach API, it fills the Java heap
 * until the JVM throws OutOfMemoryError. With -XX:+ExitOnOutOfMemoryError (which the scenario must
 * give the target broker) the JVM then exits at once, as a broker that runs out of heap in
 * production does when so configured. Without that flag the error would only end this thread.
 */
public final class OomAgent {
    static final List<byte[]> HOLD = new ArrayList<>();

    public static void agentmain(String args) {
        Thread t = new Thread(() -> {
            System.err.println("rmqchaos OomAgent: filling the heap to provoke OutOfMemoryError");
            while (true) {
                HOLD.add(new byte[8 << 20]);
            }
        }, "rmqchaos-oom-agent");
        t.setDaemon(true);
        t.start();
    }

    /** java -cp rmqchaos-java.jar io.rmqchaos.OomAgent PID: attach to PID and load this jar as an agent. */
    public static void main(String[] a) throws Exception {
        String jar = OomAgent.class.getProtectionDomain().getCodeSource().getLocation().getPath();
        com.sun.tools.attach.VirtualMachine vm = com.sun.tools.attach.VirtualMachine.attach(a[0]);
        try {
            vm.loadAgent(jar);
        } finally {
            vm.detach();
        }
        System.out.println("agent loaded into " + a[0]);
    }
}
