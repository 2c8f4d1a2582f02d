#!/usr/bin/env bash
# Runs Weir's whole test suite from a fresh clone: sets the machine up (scripts/setup.sh),
# builds the host (the one build examples/flights/run.sh shares, in the one CARGO_TARGET_DIR),
# then with its `weir transform build` the WebAssembly plugins and test guests (Rust, and Python,
# JavaScript and Go after their SDKs' own unit tests; `weir transform test` on the ports), makes
# the release tarball (scripts/dist.sh), and runs every test of the workspace against a real
# Kafka broker and PostgreSQL cluster. Starts the broker (scripts/kafka.sh) and the cluster
# (scripts/postgres.sh, port 5433) when they are not running, and stops on exit whichever it
# started. The dashboard's browser test
# (tests/observability.rs) drives Debian's headless chromium; its screenshots go to
# $CARGO_TARGET_DIR/release/test-artifacts/.
# Extra arguments go to `cargo test` (e.g. a test name filter).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh host guests polyglot kafka postgres browser

# One EXIT trap for both services: it stops, newest first, those this script started (each is
# named before its start, so a start that fails half way is cleaned up too).
started=()
stop_started() {
    local i
    for ((i = ${#started[@]} - 1; i >= 0; i--)); do
        scripts/"${started[i]}".sh stop || echo "test.sh: scripts/${started[i]}.sh stop failed" >&2
    done
}
trap stop_started EXIT
if ! scripts/kafka.sh status >/dev/null 2>&1; then
    started+=(kafka)
    # Every test makes its own uniquely named topics; those of earlier runs only slow the broker.
    scripts/kafka.sh start --fresh
fi
if ! scripts/postgres.sh status >/dev/null 2>&1; then
    started+=(postgres)
    scripts/postgres.sh start
fi

"${WEIR_HOST_BUILD[@]}"
scripts/build-plugins.sh --test
scripts/build-polyglot.sh --test
# The release tarball, which tests/release.rs unpacks and runs as a user would.
scripts/dist.sh
# Pipeline tests each run `weir` processes against one broker; two at a time suit 2 cores.
cargo test --release --workspace -- --test-threads=2 "$@"
echo "test artifacts (the dashboard test's screenshots): $CARGO_TARGET_DIR/release/test-artifacts"
