#!/usr/bin/env bash
# Runs Weir's whole test suite from a fresh clone: sets the machine up (scripts/setup.sh),
# builds the host (the one build examples/flights/run.sh shares, in the one CARGO_TARGET_DIR),
# then with its `weir transform build` the WebAssembly plugins and test guests (Rust, and Python,
# JavaScript and Go after their SDKs' own unit tests; `weir transform test` on the ports), makes
# the release tarball (scripts/dist.sh), and runs every test of the workspace against a real
# Kafka broker. Starts the broker (scripts/kafka.sh) when none is running, and stops it again
# then. The dashboard's browser test
# (tests/observability.rs) drives Debian's headless chromium; its screenshots go to
# $CARGO_TARGET_DIR/release/test-artifacts/.
# Extra arguments go to `cargo test` (e.g. a test name filter).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh host guests polyglot kafka browser

if ! scripts/kafka.sh status >/dev/null 2>&1; then
    scripts/kafka.sh start
    trap 'scripts/kafka.sh stop' EXIT
fi

"${WEIR_HOST_BUILD[@]}"
scripts/build-plugins.sh --test
scripts/build-polyglot.sh --test
# The release tarball, which tests/release.rs unpacks and runs as a user would.
scripts/dist.sh
# Pipeline tests each run `weir` processes against one broker; two at a time suit 2 cores.
cargo test --release --workspace -- --test-threads=2 "$@"
echo "test artifacts (the dashboard test's screenshots): $CARGO_TARGET_DIR/release/test-artifacts"
