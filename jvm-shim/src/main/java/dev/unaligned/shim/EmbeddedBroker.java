package dev.unaligned.shim;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.Reader;
import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import kafka.server.KafkaConfig;
import org.apache.kafka.common.utils.Time;

/**
 * Runs ONE single-node KRaft Kafka server (process.roles=broker,controller) in this JVM.
 *
 * <p>Usage: {@code java dev.unaligned.shim.EmbeddedBroker <server.properties> <cluster-id>
 * [format arguments...]}. {@code unaligned.testing.broker_config} writes the properties file: the
 * listeners (loopback only), the log directory and the replication settings. The format arguments
 * go to the storage tool's format step ({@code --add-scram SCRAM-SHA-512=[name=...,password=...]}
 * creates SCRAM users).
 *
 * <p>Steps:
 * <ol>
 *   <li>Format the log directory with Kafka's own storage tool and the format arguments (skipped
 *       when already formatted).</li>
 *   <li>Start the server and wait until its broker listener answers a describe-cluster call.</li>
 *   <li>Print exactly one line {@code UNALIGNED-SHIM READY 127.0.0.1:<port>} on stdout.</li>
 *   <li>Serve commands read line by line from stdin (see {@link ShimCommands}); every reply is
 *       one stdout line starting with {@code UNALIGNED-SHIM }.</li>
 *   <li>Stop when stdin reaches end of file (the parent died or closed it) or on SIGTERM.</li>
 * </ol>
 * Stdout carries only protocol lines; logs go to stderr at WARN.
 *
 * <p>The same source builds against every supported Kafka version (3.6 to 4.4: the build sets
 * {@code kafka.version}): the server's constructor and the storage tool changed between them, so
 * both are reached by reflection ({@link #newServer}, {@link #format}).
 */
public final class EmbeddedBroker {

    static final String PREFIX = "UNALIGNED-SHIM ";

    private static final AtomicBoolean STOPPED = new AtomicBoolean(false);

    private EmbeddedBroker() {
    }

    public static void main(String[] args) {
        if (args.length < 2) {
            System.err.println(
                    "usage: EmbeddedBroker <server.properties> <cluster-id> [format arguments...]");
            System.exit(2);
        }
        try {
            run(args);
        } catch (Throwable t) {
            // Kafka's non-daemon threads would keep a half-started broker alive: exit instead.
            System.err.println("unaligned-shim: the embedded broker failed:");
            t.printStackTrace();
            System.exit(1);
        }
        // stdin closed or STOP: exiting runs the shutdown hook, which stops the server.
        System.exit(0);
    }

    private static void run(String[] args) throws Exception {
        Path propertiesFile = Paths.get(args[0]);
        String clusterId = args[1];
        Properties props = new Properties();
        try (Reader reader = Files.newBufferedReader(propertiesFile, StandardCharsets.UTF_8)) {
            props.load(reader);
        }

        // 1. Format (idempotent: --ignore-formatted keeps an existing, matching directory).
        format(propertiesFile, clusterId, Arrays.asList(args).subList(2, args.length));

        // 2. Start the server; its shutdown runs from a JVM shutdown hook (SIGTERM, exit).
        KafkaConfig config = KafkaConfig.fromProps(props, false);
        Object server = newServer(config);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> stop(server), "unaligned-shim-stop"));
        call(server, "startup");

        String bootstrap = brokerEndpoint(props);
        try (ShimCommands commands = new ShimCommands(bootstrap)) {
            commands.awaitServing(TimeUnit.SECONDS.toMillis(60));

            // 3. Ready.
            reply("READY " + bootstrap);

            // 4. Serve commands until stdin closes.
            BufferedReader stdin = new BufferedReader(
                    new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = stdin.readLine()) != null) {
                line = line.trim();
                if (line.isEmpty()) {
                    continue;
                }
                if (line.equals("STOP")) {
                    break;
                }
                try {
                    reply("OK " + commands.run(line));
                } catch (Exception e) {
                    Throwable cause = e.getCause() != null ? e.getCause() : e;
                    reply("ERROR " + String.valueOf(cause).replace('\n', ' '));
                }
            }
        }
    }

    static synchronized void reply(String line) {
        System.out.println(PREFIX + line);
        System.out.flush();
    }

    /**
     * {@code new KafkaRaftServer(config, time)} (Kafka 3.7 and later) or {@code new
     * KafkaRaftServer(config, time, threadNamePrefix = None)} (3.6).
     */
    static Object newServer(KafkaConfig config) throws Exception {
        Class<?> serverClass = Class.forName("kafka.server.KafkaRaftServer");
        for (Constructor<?> constructor : serverClass.getConstructors()) {
            Class<?>[] types = constructor.getParameterTypes();
            if (types.length == 2 && types[1] == Time.class) {
                return constructor.newInstance(config, Time.SYSTEM);
            }
            if (types.length == 3 && types[1] == Time.class
                    && types[2].getName().equals("scala.Option")) {
                Object none = Class.forName("scala.None$").getField("MODULE$").get(null);
                return constructor.newInstance(config, Time.SYSTEM, none);
            }
        }
        throw new IllegalStateException("no KafkaRaftServer constructor this launcher knows");
    }

    private static void call(Object target, String method) throws Exception {
        try {
            target.getClass().getMethod(method).invoke(target);
        } catch (InvocationTargetException e) {
            throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
        }
    }

    /** Thrown by the exit procedure while the 3.6 storage tool's {@code main} runs. */
    private static final class ToolExit extends RuntimeException {
        final int code;

        ToolExit(int code) {
            super("exit " + code, null, false, false);
            this.code = code;
        }
    }

    /**
     * Kafka's storage tool: {@code StorageTool.execute(args, out)} where it exists (3.7 and
     * later), else its {@code main}, with Kafka's exit procedure turned into an exception and
     * stdout captured (stdout carries only protocol lines).
     */
    private static int runStorageTool(String[] args, PrintStream print) throws Exception {
        Class<?> tool = Class.forName("kafka.tools.StorageTool");
        try {
            Method execute = tool.getMethod("execute", String[].class, PrintStream.class);
            try {
                return ((Number) execute.invoke(null, args, print)).intValue();
            } catch (InvocationTargetException e) {
                throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
            }
        } catch (NoSuchMethodException e) {
            // Kafka 3.6: main() ends with Exit.exit(code)
        }
        Class<?> exit = Class.forName("org.apache.kafka.common.utils.Exit");
        Class<?> procedure = Class.forName("org.apache.kafka.common.utils.Exit$Procedure");
        Object throwing = Proxy.newProxyInstance(procedure.getClassLoader(),
                new Class<?>[] {procedure}, (proxy, method, methodArgs) -> {
                    switch (method.getName()) {
                        case "execute":
                            throw new ToolExit((Integer) methodArgs[0]);
                        case "hashCode":
                            return System.identityHashCode(proxy);
                        case "equals":
                            return proxy == methodArgs[0];
                        default:
                            return "unaligned-shim exit procedure";
                    }
                });
        PrintStream stdout = System.out;
        exit.getMethod("setExitProcedure", procedure).invoke(null, throwing);
        System.setOut(print);
        try {
            tool.getMethod("main", String[].class).invoke(null, (Object) args);
            return 0;
        } catch (InvocationTargetException e) {
            if (e.getCause() instanceof ToolExit) {
                return ((ToolExit) e.getCause()).code;
            }
            throw e;
        } finally {
            System.setOut(stdout);
            exit.getMethod("resetExitProcedure").invoke(null);
        }
    }

    private static void format(Path propertiesFile, String clusterId, List<String> extra) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        List<String> command = new ArrayList<>(List.of(
                "format", "--config", propertiesFile.toString(), "--cluster-id", clusterId,
                "--ignore-formatted"));
        command.addAll(extra);
        int rc;
        try (PrintStream print = new PrintStream(out, true, StandardCharsets.UTF_8)) {
            rc = runStorageTool(command.toArray(new String[0]), print);
        } catch (Exception e) {
            throw new IllegalStateException("formatting the log directory failed: " + e
                    + " " + out.toString(StandardCharsets.UTF_8), e);
        }
        if (rc != 0) {
            throw new IllegalStateException("formatting the log directory failed with exit code "
                    + rc + ": " + out.toString(StandardCharsets.UTF_8));
        }
    }

    /** The first listener that is not a controller listener, as {@code host:port}. */
    static String brokerEndpoint(Properties props) {
        List<String> controllerNames = List.of(
                props.getProperty("controller.listener.names", "CONTROLLER").split(","));
        for (String listener : props.getProperty("listeners", "").split(",")) {
            String[] nameAndAddress = listener.trim().split("://", 2);
            if (nameAndAddress.length == 2 && !controllerNames.contains(nameAndAddress[0])) {
                return nameAndAddress[1];
            }
        }
        throw new IllegalArgumentException("no broker listener in listeners="
                + props.getProperty("listeners"));
    }

    private static void stop(Object server) {
        if (!STOPPED.compareAndSet(false, true)) {
            return;
        }
        try {
            call(server, "shutdown");
            call(server, "awaitShutdown");
        } catch (Throwable t) {
            System.err.println("unaligned-shim: error while stopping the broker: " + t);
        }
    }
}
