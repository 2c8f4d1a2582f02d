#!/usr/bin/env bash
# Builds the Python, JavaScript and Go transforms into weir:transform@0.1.0 components,
# installing the pinned build tools that are missing:
#
#   scripts/build-polyglot.sh [--test] [py] [js] [go]
#
# Languages default to all three. For each language it builds the flight-delays port
# (plugins-polyglot/flight-delays-<lang>) and the sandbox probe used by the tests
# (tests/guests/sandbox-<lang>) into $WEIR_PLUGIN_DIR (default <repo>/target/plugins) as
# flight-delays-<lang>.wasm and sandbox-<lang>.wasm, printing sizes and build times. Tools go to
# ${WEIR_CACHE:-~/.cache/weir}/polyglot (a venv with componentize-py) and
# guest-sdk/js/node_modules (`npm ci`: componentize-js, jco); Go needs no extra tool.
#
#   --test   first run the SDKs' and ports' native unit tests (pytest, node --test, go test)
#
# tests/polyglot.rs then runs the components through the host (`cargo test --test polyglot`).
set -euo pipefail

usage() { sed -n '2,16s/^# \{0,1\}//p' "$0"; }

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

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

if $run_tests; then
    if has py; then
        echo "build-polyglot: python tests" >&2
        python3 -m pytest -q "$repo/guest-sdk/python/tests" "$repo/plugins-polyglot/flight-delays-py/tests"
    fi
    if has js || has go; then "$repo/guest-sdk/js/install.sh"; fi
    if has js; then
        echo "build-polyglot: javascript tests" >&2
        (cd "$repo/guest-sdk/js" && node --import ./testing/register.js --test test/)
        (cd "$repo/plugins-polyglot/flight-delays-js" &&
            node --import ../../guest-sdk/js/testing/register.js --test test/)
    fi
    if has go; then
        echo "build-polyglot: go tests" >&2
        (cd "$repo/guest-sdk/go" && go test ./...)
        (cd "$repo/plugins-polyglot/flight-delays-go" && go test ./...)
    fi
fi

# build LANG SOURCE-DIR NAME: one component, $out_dir/NAME.wasm.
build() {
    local lang=$1 dir=$2 dest=$out_dir/$3.wasm
    local started
    started=$(now)
    echo "build-polyglot: building $3" >&2
    case $lang in
        py) "$repo/guest-sdk/python/build.sh" "$dir" "$(basename "$dir"/*.py .py)" "$dest" ;;
        js) "$repo/guest-sdk/js/build.sh" "$dir/index.js" "$dest" ;;
        go) "$repo/guest-sdk/go/build.sh" "$dir" "$dest" ;;
    esac
    # A component starts with \0asm, version 0x0d 0x00, layer 0x01 0x00.
    local header
    header=$(head -c 8 "$dest" | od -An -tx1 | tr -d ' \n')
    if [[ $header != 0061736d0d000100 ]]; then
        echo "build-polyglot: $dest is not a component (header $header)" >&2
        return 1
    fi
    printf '%-24s %10d bytes  %6ss\n' "$3.wasm" "$(stat -c %s "$dest")" "$(elapsed "$started")"
}

mkdir -p "$out_dir"
for lang in "${langs[@]}"; do
    build "$lang" "$repo/plugins-polyglot/flight-delays-$lang" "flight-delays-$lang"
    build "$lang" "$repo/tests/guests/sandbox-$lang" "sandbox-$lang"
done
