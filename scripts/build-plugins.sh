#!/usr/bin/env bash
# Builds Weir's Rust transforms and Rust test guests into WebAssembly components (wasm32-wasip2),
# each as <name>.wasm in one folder:
#
#   scripts/build-plugins.sh [--test] [dir ...]
#
# A dir that is a transform project (it holds a weir-transform.toml) is built and checked by
# `weir transform build`; a Rust crate without one (the test guests in tests/guests, some of
# which break the contract on purpose) by guest-sdk/rust/build.sh alone. A dir that is neither
# stands for its subfolders holding a Cargo.toml. Dirs default to plugins/ and tests/guests/.
# Output folder: $WEIR_PLUGIN_DIR, default <repo>/target/plugins. `weir` comes from the one host
# build (scripts/setup.sh's WEIR_HOST_BUILD), which runs first and has nothing to do when built.
#
#   --test   then run the Rust SDK's own unit tests (guest-sdk/rust, natively) and `weir
#            transform test` on each transform project: its unit tests (cargo test, natively)
#            and its samples
set -euo pipefail

usage() { sed -n '2,17s/^# \{0,1\}//p' "$0"; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dirs=()
run_tests=false
for arg in "$@"; do
    case $arg in
        --test) run_tests=true ;;
        -h | --help) usage; exit 0 ;;
        -*) echo "build-plugins: unknown option $arg" >&2; usage >&2; exit 2 ;;
        *)
            if [[ -d $arg ]]; then dirs+=("$(cd "$arg" && pwd)")
            elif [[ -d $repo/$arg ]]; then dirs+=("$repo/$arg")
            else echo "build-plugins: no folder $arg" >&2; exit 2
            fi ;;
    esac
done
((${#dirs[@]})) || dirs=("$repo/plugins" "$repo/tests/guests")

# shellcheck source=setup.sh
source "$repo/scripts/setup.sh" host guests
out_dir=${WEIR_PLUGIN_DIR:-$repo/target/plugins}
[[ $out_dir = /* ]] || out_dir=$PWD/$out_dir
weir_cli

# build DIR: one crate.
build() {
    local dir=$1 name
    name=$(basename "$1")
    if [[ -f $dir/weir-transform.toml ]]; then
        "$WEIR_CLI" transform build "$dir" --out-dir "$out_dir" >/dev/null
        projects+=("$dir")
    else
        "$repo/guest-sdk/rust/build.sh" "$dir" "$out_dir/$name.wasm"
    fi
    printf '%-28s %9d bytes  %s\n' "$name.wasm" "$(stat -c %s "$out_dir/$name.wasm")" "$out_dir/$name.wasm"
}

mkdir -p "$out_dir"
projects=()
for dir in "${dirs[@]}"; do
    if [[ -f $dir/weir-transform.toml ]] || grep -qs '^\[package\]' "$dir/Cargo.toml"; then
        build "$dir"
        continue
    fi
    crates=("$dir"/*/Cargo.toml)
    [[ -f ${crates[0]} ]] || { echo "build-plugins: no crate in $dir" >&2; exit 2; }
    for crate in "${crates[@]}"; do build "$(dirname "$crate")"; done
done
if $run_tests; then
    # Natively, beside the projects' native builds (`weir transform test`'s target dirs).
    CARGO_TARGET_DIR=$CARGO_TARGET_DIR/guests-native/weir-guest-sdk \
        cargo test --quiet --manifest-path "$repo/guest-sdk/rust/Cargo.toml"
    for dir in "${projects[@]}"; do "$WEIR_CLI" transform test "$dir" --out-dir "$out_dir"; done
fi
