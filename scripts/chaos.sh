#!/usr/bin/env bash
# The chaos run of the main job: all 336,776 flights through flight-delays exactly-once while
# `weir run` is SIGKILLed at random moments (WEIR_CHAOS_KILLS, default 20), the broker is
# restarted and a transaction timeout is forced; then the output is verified key by key and one
# summary line is printed. Set WEIR_CHAOS_SEED to replay a run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh host guests kafka
if ! scripts/kafka.sh status >/dev/null 2>&1; then
    scripts/kafka.sh start
    trap 'scripts/kafka.sh stop' EXIT
fi
scripts/build-plugins.sh plugins
"${WEIR_HOST_BUILD[@]}"
cargo test --release -p weir-tests --test chaos_flights -- --nocapture
