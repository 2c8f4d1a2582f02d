package weir.bench.kstreams;

import weir.bench.common.FlightDelays;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.file.Path;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The same flights and expected bytes as the plugin's own unit test (plugins/flight-delays/src/lib.rs). */
class FlightDelaysAppTest {
    static String flight(String origin, String carrier, String depDelay) {
        return "{\"year\":2013,\"month\":1,\"day\":1,\"dep_time\":517,\"sched_dep_time\":515,\"dep_delay\":" + depDelay
                + ",\"carrier\":\"" + carrier + "\",\"flight\":1545,\"origin\":\"" + origin
                + "\",\"dest\":\"IAH\",\"distance\":1400}";
    }

    @Test
    void runningStatisticsPerOriginAndCarrier(@TempDir Path stateDir) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "test");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
        try (TopologyTestDriver driver = new TopologyTestDriver(FlightDelaysApp.topology("in", "out", 15), props)) {
            TestInputTopic<String, String> in = driver.createInputTopic("in", new StringSerializer(), new StringSerializer());
            TestOutputTopic<String, String> out = driver.createOutputTopic("out", new StringDeserializer(), new StringDeserializer());
            in.pipeInput(null, flight("EWR", "UA", "null"));
            in.pipeInput(null, flight("EWR", "UA", "2"));
            in.pipeInput(null, flight("JFK", "AA", "-4"));
            in.pipeInput(null, "not json"); // skipped
            in.pipeInput(null, flight("EWR", "UA", "16.0"));
            in.pipeInput(null, flight("EWR", "UA", "15"));
            in.pipeInput(null, flight("EWR", "UA", "2.5")); // skipped
            List<KeyValue<String, String>> got = out.readKeyValuesToList();
            assertEquals(5, got.size());
            assertEquals(KeyValue.pair("EWR|UA",
                    "{\"origin\":\"EWR\",\"carrier\":\"UA\",\"flights\":1,\"departed\":0,\"delayed\":0,\"total_dep_delay\":0,\"max_dep_delay\":null,\"mean_dep_delay\":null}"),
                    got.get(0));
            assertEquals(KeyValue.pair("JFK|AA",
                    "{\"origin\":\"JFK\",\"carrier\":\"AA\",\"flights\":1,\"departed\":1,\"delayed\":0,\"total_dep_delay\":-4,\"max_dep_delay\":-4,\"mean_dep_delay\":-4.0}"),
                    got.get(2));
            assertEquals(KeyValue.pair("EWR|UA",
                    "{\"origin\":\"EWR\",\"carrier\":\"UA\",\"flights\":4,\"departed\":3,\"delayed\":1,\"total_dep_delay\":33,\"max_dep_delay\":16,\"mean_dep_delay\":11.0}"),
                    got.get(4));
            assertEquals("{\"flights\":4,\"departed\":3,\"delayed\":1,\"total_dep_delay\":33,\"max_dep_delay\":16}",
                    driver.<String, String>getKeyValueStore(FlightDelaysApp.STORE).get("EWR|UA"));
        }
    }

    @Test
    void floatsAreLaidOutLikeRust() {
        // serde_json / ryu output for each (the first five seen from the real plugin).
        String[][] cases = {
            {"11.0", "11.0"}, {"-4.0", "-4.0"}, {"0.3333333333333333", "0.3333333333333333"},
            {"-0.00088261253309797", "-0.00088261253309797"}, {"4.3975373790677223E-4", "0.00043975373790677223"},
            {"12.52286865854727", "12.52286865854727"}, {"0.0", "0.0"}, {"-0.0", "-0.0"}, {"1e16", "1e16"},
            {"1e15", "1000000000000000.0"}, {"1.5e-7", "1.5e-7"}, {"0.00001", "0.00001"}, {"1e-6", "1e-6"},
            {"123456789012345680", "1.2345678901234568e17"}, {"1234.5", "1234.5"},
            {"1.7976931348623157e308", "1.7976931348623157e308"}, {"0.1", "0.1"}, {"100.0", "100.0"},
        };
        for (String[] c : cases) {
            assertEquals(c[1], FlightDelays.rustFloat(Double.parseDouble(c[0])), c[0]);
        }
    }

    @Test
    void meanIsShortestRoundTrip() {
        FlightDelays.Stats s = new FlightDelays.Stats();
        s.add(1L, 15);
        s.add(0L, 15);
        s.add(0L, 15);
        String json = FlightDelays.summaryJson(s, "LGA", "DL");
        assertEquals(true, json.endsWith("\"mean_dep_delay\":0.3333333333333333}"), json);
    }
}
