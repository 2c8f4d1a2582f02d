package weir.bench.common;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.errors.TopicExistsException;

/**
 * The command line both JVM twins share with scripts/bench.sh, and their output-topic setup.
 * Flags: --bootstrap --input --output --application-id --state-dir (required),
 * --commit-interval-ms (1000), --threads (1), --threshold-minutes (15).
 */
public final class BenchCli {
    private static final List<String> REQUIRED = List.of("bootstrap", "input", "output", "application-id", "state-dir");
    private static final Map<String, String> DEFAULTS =
            Map.of("commit-interval-ms", "1000", "threads", "1", "threshold-minutes", "15");

    private BenchCli() {}

    /** The flags as a map; prints {@code usage} and exits 2 on a bad, unknown or missing flag. */
    public static Map<String, String> parseArgs(String usage, String[] args) {
        Map<String, String> opts = new LinkedHashMap<>(DEFAULTS);
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("-h") || args[i].equals("--help")) {
                System.out.println(usage);
                System.exit(0);
            }
            String name = args[i].startsWith("--") ? args[i].substring(2) : "";
            if (i + 1 >= args.length || !(REQUIRED.contains(name) || DEFAULTS.containsKey(name))) {
                fail(usage, "bad or unknown argument " + args[i]);
            }
            opts.put(name, args[++i]);
        }
        for (String required : REQUIRED) {
            if (!opts.containsKey(required)) {
                fail(usage, "missing --" + required);
            }
        }
        return opts;
    }

    private static void fail(String usage, String message) {
        System.err.println(message);
        System.err.println(usage);
        System.exit(2);
    }

    /**
     * Creates the output topic when missing, with the input's partition count (neither Kafka
     * Streams nor this broker creates sink topics; Weir's sink does with {@code create_topics}).
     */
    public static void createOutputTopic(String bootstrap, String input, String output) throws InterruptedException {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(props)) {
            int partitions = admin.describeTopics(List.of(input)).allTopicNames().get().get(input).partitions().size();
            admin.createTopics(List.of(new NewTopic(output, Optional.of(partitions), Optional.empty()))).all().get();
            System.err.println("created topic " + output + " with " + partitions + " partitions");
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) {
                System.err.println("cannot create the output topic " + output + ": " + e.getCause());
                System.exit(1);
            }
        }
    }
}
