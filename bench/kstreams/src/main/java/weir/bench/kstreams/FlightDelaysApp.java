package weir.bench.kstreams;

import weir.bench.common.BenchCli;
import weir.bench.common.FlightDelays;

import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Kafka Streams twin of Weir's flight-delays plugin, for scripts/bench.sh. The input is already
 * partitioned by origin|carrier, so there is no repartition: one Processor API node with a
 * persistent RocksDB store, one output record per input record.
 */
public final class FlightDelaysApp {
    static final String STORE = "flight-delays-state";
    private static final Logger LOG = LoggerFactory.getLogger(FlightDelaysApp.class);

    private FlightDelaysApp() {}

    /** input topic → process (state store) → output topic. */
    public static Topology topology(String input, String output, long thresholdMinutes) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.addStateStore(Stores.keyValueStoreBuilder(
                        Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.String())
                .withCachingEnabled());
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .process(() -> new StatsProcessor(thresholdMinutes), STORE)
                .to(output, Produced.with(Serdes.String(), Serdes.String()));
        return builder.build();
    }

    static final class StatsProcessor implements Processor<String, String, String, String> {
        private final long thresholdMinutes;
        private ProcessorContext<String, String> context;
        private KeyValueStore<String, String> store;

        StatsProcessor(long thresholdMinutes) {
            this.thresholdMinutes = thresholdMinutes;
        }

        @Override
        public void init(ProcessorContext<String, String> context) {
            this.context = context;
            this.store = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<String, String> record) {
            FlightDelays.Flight flight;
            try {
                flight = FlightDelays.parseFlight(record.value());
            } catch (FlightDelays.BadRecord e) {
                // Weir's plugin fails the batch here; the benchmark data has no bad records.
                LOG.warn("skipping record at {}: {}", context.recordMetadata().map(m -> m.topic() + "-"
                        + m.partition() + "@" + m.offset()).orElse("?"), e.getMessage());
                return;
            }
            String key = flight.key();
            FlightDelays.Stats stats = FlightDelays.parseState(store.get(key));
            stats.add(flight.depDelay(), thresholdMinutes);
            store.put(key, FlightDelays.stateJson(stats));
            // Same timestamp (and headers) as the input record.
            context.forward(record.withKey(key)
                    .withValue(FlightDelays.summaryJson(stats, flight.origin(), flight.carrier())));
        }
    }

    private static final String USAGE = "usage: java -jar weir-kstreams-flight-delays.jar --bootstrap HOST:PORT"
            + " --input TOPIC --output TOPIC --application-id ID --state-dir DIR"
            + " [--commit-interval-ms 1000] [--threads 1] [--threshold-minutes 15]";

    public static void main(String[] args) throws InterruptedException {
        Map<String, String> opts = BenchCli.parseArgs(USAGE, args);
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, opts.get("application-id"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, opts.get("bootstrap"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, opts.get("state-dir"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(opts.get("commit-interval-ms")));
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(opts.get("threads")));
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

        Topology topology = topology(opts.get("input"), opts.get("output"),
                Long.parseLong(opts.get("threshold-minutes")));
        BenchCli.createOutputTopic(opts.get("bootstrap"), opts.get("input"), opts.get("output"));
        KafkaStreams streams = new KafkaStreams(topology, props);
        CountDownLatch stopped = new CountDownLatch(1);
        AtomicBoolean announced = new AtomicBoolean();
        AtomicBoolean failed = new AtomicBoolean();
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING && announced.compareAndSet(false, true)) {
                System.out.println("state RUNNING");
                System.out.flush();
            }
            if (now == KafkaStreams.State.ERROR) {
                failed.set(true);
            }
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            LOG.error("stream thread failed", e);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Thread hook = new Thread(() -> {
            // SIGTERM / SIGINT: commit what is processed and leave; exit status 0 when closed in time.
            boolean closed = streams.close(Duration.ofSeconds(60));
            stopped.countDown();
            System.err.println(closed ? "closed" : "close timed out");
            Runtime.getRuntime().halt(closed && !failed.get() ? 0 : 1);
        }, "shutdown");
        Runtime.getRuntime().addShutdownHook(hook);
        streams.start();
        stopped.await();
        if (failed.get()) {
            streams.close(Duration.ofSeconds(60));
            System.err.println("Kafka Streams failed; see the log above");
            Runtime.getRuntime().halt(1);
        }
    }
}
