package weir.bench.common;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.io.NumberOutput;
import java.io.IOException;
import java.io.StringWriter;

/**
 * The semantics of Weir's {@code plugins/flight-delays} (see its README), without Kafka: parse a
 * flight, update the per-{@code origin|carrier} counters, render the state and the output value
 * as compact JSON with the plugin's field order.
 */
public final class FlightDelays {
    static final JsonFactory JSON = new JsonFactory();

    private FlightDelays() {}

    /** A record the plugin would reject (its batch would fail); here it is logged and skipped. */
    public static final class BadRecord extends Exception {
        BadRecord(String message) {
            super(message);
        }
    }

    /** The fields of one flight that the statistics use; {@code depDelay} null when not departed. */
    public record Flight(String origin, String carrier, Long depDelay) {
        public String key() {
            return origin + "|" + carrier;
        }
    }

    /** Counters kept in state under the key {@code origin|carrier}. */
    public static final class Stats {
        long flights;
        long departed;
        long delayed;
        long totalDepDelay;
        Long maxDepDelay;

        public void add(Long depDelay, long thresholdMinutes) {
            flights += 1;
            if (depDelay != null) {
                long d = depDelay;
                departed += 1;
                if (d > thresholdMinutes) {
                    delayed += 1;
                }
                totalDepDelay += d;
                maxDepDelay = maxDepDelay == null ? d : Math.max(maxDepDelay, d);
            }
        }
    }

    public static Flight parseFlight(String value) throws BadRecord {
        if (value == null) {
            throw new BadRecord("null value, expected a JSON object");
        }
        String origin = null;
        String carrier = null;
        Long depDelay = null;
        boolean originSeen = false;
        boolean carrierSeen = false;
        try (JsonParser p = JSON.createParser(value)) {
            if (p.nextToken() != JsonToken.START_OBJECT) {
                throw new BadRecord("value is not a JSON object");
            }
            JsonToken t;
            while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
                String name = p.currentName();
                JsonToken v = p.nextToken();
                switch (name) {
                    case "origin" -> {
                        originSeen = true;
                        origin = v == JsonToken.VALUE_STRING ? p.getText() : null;
                        p.skipChildren();
                    }
                    case "carrier" -> {
                        carrierSeen = true;
                        carrier = v == JsonToken.VALUE_STRING ? p.getText() : null;
                        p.skipChildren();
                    }
                    case "dep_delay" -> depDelay = wholeMinutes(p, v);
                    default -> p.skipChildren();
                }
            }
            if (t != JsonToken.END_OBJECT || p.nextToken() != null) {
                throw new BadRecord("value is not JSON: trailing data");
            }
        } catch (IOException e) {
            throw new BadRecord("value is not JSON: " + e.getMessage());
        }
        if (!originSeen) throw new BadRecord("field `origin` is missing");
        if (origin == null) throw new BadRecord("field `origin` is not a string");
        if (!carrierSeen) throw new BadRecord("field `carrier` is missing");
        if (carrier == null) throw new BadRecord("field `carrier` is not a string");
        return new Flight(origin, carrier, depDelay);
    }

    /** {@code dep_delay}: null, an integer, or a float with no fraction (like serde_json's as_i64 / as_f64). */
    private static Long wholeMinutes(JsonParser p, JsonToken v) throws IOException, BadRecord {
        switch (v) {
            case VALUE_NULL:
                return null;
            case VALUE_NUMBER_INT:
                if (p.getNumberType() == JsonParser.NumberType.INT || p.getNumberType() == JsonParser.NumberType.LONG) {
                    return p.getLongValue();
                }
                // Falls through: beyond i64, serde_json would try it as a float.
            case VALUE_NUMBER_FLOAT: {
                double f = p.getDoubleValue();
                if (f == Math.rint(f) && Math.abs(f) < 9.0e15) {
                    return (long) f;
                }
                throw new BadRecord("field `dep_delay` is not a whole number of minutes: " + p.getText());
            }
            default:
                p.skipChildren();
                throw new BadRecord("field `dep_delay` is not a number or null");
        }
    }

    /** State JSON, exactly the plugin's: {"flights","departed","delayed","total_dep_delay","max_dep_delay"}. */
    public static String stateJson(Stats s) {
        StringWriter out = new StringWriter(96);
        try (JsonGenerator g = JSON.createGenerator(out)) {
            g.writeStartObject();
            g.writeNumberField("flights", s.flights);
            g.writeNumberField("departed", s.departed);
            g.writeNumberField("delayed", s.delayed);
            g.writeNumberField("total_dep_delay", s.totalDepDelay);
            writeNullableLong(g, "max_dep_delay", s.maxDepDelay);
            g.writeEndObject();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        return out.toString();
    }

    public static Stats parseState(String json) {
        Stats s = new Stats();
        if (json == null) {
            return s;
        }
        try (JsonParser p = JSON.createParser(json)) {
            p.nextToken();
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                String name = p.currentName();
                JsonToken v = p.nextToken();
                switch (name) {
                    case "flights" -> s.flights = p.getLongValue();
                    case "departed" -> s.departed = p.getLongValue();
                    case "delayed" -> s.delayed = p.getLongValue();
                    case "total_dep_delay" -> s.totalDepDelay = p.getLongValue();
                    case "max_dep_delay" -> s.maxDepDelay = v == JsonToken.VALUE_NULL ? null : p.getLongValue();
                    default -> p.skipChildren();
                }
            }
        } catch (IOException e) {
            throw new IllegalStateException("corrupt state value " + json, e);
        }
        return s;
    }

    /** The output value, fields in the plugin's order. */
    public static String summaryJson(Stats s, String origin, String carrier) {
        StringWriter out = new StringWriter(160);
        try (JsonGenerator g = JSON.createGenerator(out)) {
            g.writeStartObject();
            g.writeStringField("origin", origin);
            g.writeStringField("carrier", carrier);
            g.writeNumberField("flights", s.flights);
            g.writeNumberField("departed", s.departed);
            g.writeNumberField("delayed", s.delayed);
            g.writeNumberField("total_dep_delay", s.totalDepDelay);
            writeNullableLong(g, "max_dep_delay", s.maxDepDelay);
            g.writeFieldName("mean_dep_delay");
            if (s.departed > 0) {
                g.writeRawValue(rustFloat((double) s.totalDepDelay / (double) s.departed));
            } else {
                g.writeNull();
            }
            g.writeEndObject();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        return out.toString();
    }

    /**
     * A finite double exactly as serde_json (ryu) prints it, so the output bytes equal the plugin's:
     * the shortest round-trip digits (Schubfach, via Jackson's fast writer), laid out like ryu's
     * {@code format64}: {@code 11.0}, {@code 0.3333333333333333}, {@code 0.00043956043956043956},
     * {@code 1e16}, {@code 1.5e-7} (Java's own layout would give {@code 4.3956043956043956E-4}).
     * The one known difference: Java keeps two digits where ryu may print one, which only shows
     * for the smallest subnormals ({@code 4.9e-324} vs {@code 5e-324}); a mean is never one.
     */
    public static String rustFloat(double d) {
        if (d == 0.0) {
            return (1.0 / d < 0) ? "-0.0" : "0.0";
        }
        String java = NumberOutput.toString(d, true); // e.g. "-4.3956043956043956E-4", "12.5", "1.0E16"
        boolean negative = java.startsWith("-");
        String m = negative ? java.substring(1) : java;
        int exponent = 0;
        int e = m.indexOf('E');
        if (e >= 0) {
            exponent = Integer.parseInt(m.substring(e + 1));
            m = m.substring(0, e);
        }
        int dot = m.indexOf('.');
        String digits = dot < 0 ? m : m.substring(0, dot) + m.substring(dot + 1);
        int kk = (dot < 0 ? m.length() : dot) + exponent; // the value is 0.DIGITS × 10^kk
        int lead = 0;
        while (digits.charAt(lead) == '0') {
            lead++;
        }
        int end = digits.length();
        while (digits.charAt(end - 1) == '0') {
            end--;
        }
        digits = digits.substring(lead, end);
        kk -= lead;
        int length = digits.length();
        int k = kk - length; // the value is DIGITS × 10^k
        StringBuilder out = new StringBuilder(24);
        if (negative) {
            out.append('-');
        }
        if (0 <= k && kk <= 16) {
            out.append(digits).append("0".repeat(k)).append(".0");
        } else if (0 < kk && kk <= 16) {
            out.append(digits, 0, kk).append('.').append(digits, kk, length);
        } else if (-5 < kk && kk <= 0) {
            out.append("0.").append("0".repeat(-kk)).append(digits);
        } else if (length == 1) {
            out.append(digits).append('e').append(kk - 1);
        } else {
            out.append(digits.charAt(0)).append('.').append(digits, 1, length).append('e').append(kk - 1);
        }
        return out.toString();
    }

    private static void writeNullableLong(JsonGenerator g, String name, Long value) throws IOException {
        g.writeFieldName(name);
        if (value == null) {
            g.writeNull();
        } else {
            g.writeNumber(value.longValue());
        }
    }
}
