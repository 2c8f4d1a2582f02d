package weir.bench.flink;

import weir.bench.common.BenchCli;
import weir.bench.common.FlightDelays;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Flink twin of Weir's flight-delays plugin (and of bench/kstreams), for scripts/bench.sh: Kafka
 * source → parse → keyBy(origin|carrier) → keyed ValueState in RocksDB → exactly-once Kafka sink,
 * in a local MiniCluster inside this JVM, checkpointing every second.
 */
public final class FlightDelaysJob {
    private static final Logger LOG = LoggerFactory.getLogger(FlightDelaysJob.class);

    private FlightDelaysJob() {}

    /** One parsed flight; a POJO so that {@code depDelay} may be null. */
    public static final class Flight {
        public String origin;
        public String carrier;
        public Long depDelay;

        public Flight() {}
    }

    static final class Parse implements FlatMapFunction<String, Flight> {
        @Override
        public void flatMap(String value, Collector<Flight> out) {
            try {
                FlightDelays.Flight f = FlightDelays.parseFlight(value);
                Flight flight = new Flight();
                flight.origin = f.origin();
                flight.carrier = f.carrier();
                flight.depDelay = f.depDelay();
                out.collect(flight);
            } catch (FlightDelays.BadRecord e) {
                // Weir's plugin fails the batch here; the benchmark data has no bad records.
                LOG.warn("skipping record: {}", e.getMessage());
            }
        }
    }

    static final class Stats extends KeyedProcessFunction<String, Flight, Tuple2<String, String>> {
        private final long thresholdMinutes;
        private transient ValueState<String> state;

        Stats(long thresholdMinutes) {
            this.thresholdMinutes = thresholdMinutes;
        }

        @Override
        public void open(OpenContext context) {
            state = getRuntimeContext().getState(new ValueStateDescriptor<>("stats", Types.STRING));
        }

        @Override
        public void processElement(Flight f, Context ctx, Collector<Tuple2<String, String>> out) throws Exception {
            FlightDelays.Stats stats = FlightDelays.parseState(state.value());
            stats.add(f.depDelay, thresholdMinutes);
            state.update(FlightDelays.stateJson(stats));
            out.collect(Tuple2.of(ctx.getCurrentKey(), FlightDelays.summaryJson(stats, f.origin, f.carrier)));
        }
    }

    /** Key (field 0) or value (field 1) of an output pair, as UTF-8. */
    static final class Field implements SerializationSchema<Tuple2<String, String>> {
        private final int field;

        Field(int field) {
            this.field = field;
        }

        @Override
        public byte[] serialize(Tuple2<String, String> t) {
            return (field == 0 ? t.f0 : t.f1).getBytes(StandardCharsets.UTF_8);
        }
    }

    private static final String USAGE = "usage: java -jar weir-flink-flight-delays.jar --bootstrap HOST:PORT"
            + " --input TOPIC --output TOPIC --application-id ID --state-dir DIR"
            + " [--commit-interval-ms 1000] [--threads 1] [--threshold-minutes 15]"
            + " (the same flags as bench/kstreams: the commit interval is the checkpoint interval, threads the parallelism)";
    public static void main(String[] args) throws Exception {
        Map<String, String> opts = BenchCli.parseArgs(USAGE, args);
        String bootstrap = opts.get("bootstrap");
        String appId = opts.get("application-id");
        Path stateDir = Path.of(opts.get("state-dir")).toAbsolutePath();
        BenchCli.createOutputTopic(bootstrap, opts.get("input"), opts.get("output"));

        Map<String, String> conf = new HashMap<>();
        conf.put("execution.checkpointing.interval", opts.get("commit-interval-ms") + " ms");
        conf.put("execution.checkpointing.mode", "EXACTLY_ONCE");
        conf.put("execution.checkpointing.dir", stateDir.resolve("checkpoints").toUri().toString());
        conf.put("execution.checkpointing.incremental", "true");
        conf.put("state.backend.type", "rocksdb");
        conf.put("state.backend.rocksdb.localdir", stateDir.resolve("rocksdb").toString());
        conf.put("io.tmp.dirs", stateDir.resolve("tmp").toString());
        conf.put("parallelism.default", opts.get("threads"));
        conf.put("restart-strategy.type", "none");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(Configuration.fromMap(conf));

        KafkaSource<String> source = KafkaSource.<String>builder()
                .setBootstrapServers(bootstrap)
                .setTopics(opts.get("input"))
                .setGroupId(appId)
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setValueOnlyDeserializer(new SimpleStringSchema())
                .build();
        String output = opts.get("output");
        KafkaSink<Tuple2<String, String>> sink = KafkaSink.<Tuple2<String, String>>builder()
                .setBootstrapServers(bootstrap)
                .setRecordSerializer(KafkaRecordSerializationSchema.<Tuple2<String, String>>builder()
                        .setTopic(output)
                        .setKeySerializationSchema(new Field(0))
                        .setValueSerializationSchema(new Field(1))
                        .build())
                .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
                .setTransactionalIdPrefix(appId)
                .setProperty("transaction.timeout.ms", "60000")
                .build();
        long threshold = Long.parseLong(opts.get("threshold-minutes"));
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "flights")
                .flatMap(new Parse()).name("parse")
                .keyBy(f -> f.origin + "|" + f.carrier)
                .process(new Stats(threshold)).name("flight-delays")
                .sinkTo(sink).name("sink");

        JobClient job = env.executeAsync(appId);
        AtomicBoolean stopping = new AtomicBoolean();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping.set(true);
            // SIGTERM / SIGINT: cancel the job (outputs up to the last completed checkpoint are committed).
            boolean cancelled;
            try {
                job.cancel().get(60, TimeUnit.SECONDS);
                job.getJobExecutionResult().handle((r, e) -> null).get(60, TimeUnit.SECONDS);
                cancelled = true;
            } catch (Exception e) {
                cancelled = false;
            }
            System.err.println(cancelled ? "cancelled" : "cancel failed");
            Runtime.getRuntime().halt(cancelled ? 0 : 1);
        }, "shutdown"));
        while (true) {
            JobStatus status = job.getJobStatus().get();
            if (status == JobStatus.RUNNING) {
                System.out.println("state RUNNING");
                System.out.flush();
                break;
            }
            if (status.isGloballyTerminalState()) {
                break;
            }
            Thread.sleep(100);
        }
        try {
            job.getJobExecutionResult().get();
            System.err.println("job finished");
        } catch (ExecutionException e) {
            if (stopping.get()) {
                Thread.sleep(Long.MAX_VALUE); // the shutdown hook decides the exit status
            }
            LOG.error("job failed", e.getCause());
            Runtime.getRuntime().halt(1);
        }
    }
}
