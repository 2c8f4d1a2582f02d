#!/usr/bin/env bash
# Builds the Python, JavaScript and Go transforms into weir:transform components with
# `weir transform build`, which installs the pinned build tools that are missing:
#
#   scripts/build-polyglot.sh [--test] [py] [js] [go]
#
# Languages default to all three. For each language it builds the ports of the Rust plugins
# (plugins-polyglot/flight-delays-<lang>, plugins-polyglot/flights-hourly-<lang>) and the
# sandbox probe used by the tests (tests/guests/sandbox-<lang>) into $WEIR_PLUGIN_DIR (default
# <repo>/target/plugins) as <folder name>.wasm, printing sizes and build times. Tools go to
# ${WEIR_CACHE:-~/.cache/weir}/polyglot (a venv with componentize-py) and
# guest-sdk/js/node_modules (`npm ci`: componentize-js, jco); Go needs no extra tool.
#
#   --test   first run the SDKs' own unit tests (pytest, node --test, go test), then
#            `weir transform test` on each port: its unit tests and its samples (the Rust
#            plugin's, so each port's output is checked against the Rust one)
#
# tests/polyglot.rs then runs the components through the host (`cargo test --test integration polyglot::`).
set -euo pipefail

usage() { sed -n '2,18s/^# \{0,1\}//p' "$0"; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out_dir=${WEIR_PLUGIN_DIR:-$repo/target/plugins}
[[ $out_dir = /* ]] || out_dir=$PWD/$out_dir
langs=()
run_tests=false
for arg in "$@"; do
    case $arg in
        py | js | go) langs+=("$arg") ;;
        --test) run_tests=true ;;
        -h | --help) usage; exit 0 ;;
        *) echo "build-polyglot: unknown argument $arg" >&2; usage >&2; exit 2 ;;
    esac
done
((${#langs[@]})) || langs=(py js go)
has() { [[ " ${langs[*]} " == *" $1 "* ]]; }

# shellcheck source=setup.sh
source "$repo/scripts/setup.sh" host
weir_cli

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

if $run_tests; then
    if has py; then
        echo "build-polyglot: python SDK tests" >&2
        python3 -m pytest -q -p no:cacheprovider "$repo/guest-sdk/python/tests"
    fi
    if has js; then
        echo "build-polyglot: javascript SDK tests" >&2
        (cd "$repo/guest-sdk/js" && node --import ./testing/register.js --test test/)
    fi
    if has go; then
        echo "build-polyglot: go SDK tests" >&2
        (cd "$repo/guest-sdk/go" && go test ./...)
    fi
fi

# build DIR: one project, $out_dir/<folder name>.wasm.
build() {
    local name started
    name=$(basename "$1")
    started=$(now)
    echo "build-polyglot: building $name" >&2
    "$WEIR_CLI" transform build "$1" --out-dir "$out_dir" >/dev/null
    printf '%-24s %10d bytes  %6ss\n' "$name.wasm" "$(stat -c %s "$out_dir/$name.wasm")" "$(elapsed "$started")"
}

for lang in "${langs[@]}"; do
    for port in flight-delays flights-hourly; do
        build "$repo/plugins-polyglot/$port-$lang"
        if $run_tests; then
            "$WEIR_CLI" transform test "$repo/plugins-polyglot/$port-$lang" --out-dir "$out_dir"
        fi
    done
    build "$repo/tests/guests/sandbox-$lang"
done
