#!/usr/bin/env bash
# Runs one pipeline as N `weir run` processes, for scripts/bench.sh:
#
#   bench/processes.sh N <weir> run <pipeline.toml> [args…]
#
# starts `<weir> run <pipeline.toml> [args…] --instance p<i>` for i = 1..N (they share the
# partitions through the consumer group), passes SIGTERM and SIGINT on to all of them, and exits
# once all have exited: 0, or the status of the last one that failed. weir-bench measures the
# CPU time and peak RSS of the whole process tree.
set -uo pipefail
count=$1
shift
pids=()
for ((i = 1; i <= count; i++)); do
    "$@" --instance "p$i" &
    pids+=($!)
done
trap 'kill -TERM "${pids[@]}" 2> /dev/null' TERM INT
status=0
for pid in "${pids[@]}"; do
    # A trapped signal interrupts `wait`: wait again until this process has exited.
    while :; do
        wait "$pid"
        code=$?
        kill -0 "$pid" 2> /dev/null || break
    done
    ((code == 0)) || status=$code
done
exit "$status"
