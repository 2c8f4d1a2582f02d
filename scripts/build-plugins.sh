#!/usr/bin/env bash
# Builds every crate of Weir's wasm workspaces into WebAssembly components (wasm32-wasip2) and
# copies them, as <crate-name>.wasm, into one folder.
#
#   scripts/build-plugins.sh [--release|--debug] [workspace-dir ...]
#
# Workspaces default to plugins/ and tests/guests/. Output folder: $WEIR_PLUGIN_DIR, default
# <repo>/target/plugins. Cargo target dir: $CARGO_TARGET_DIR/guests (scripts/setup.sh's default
# ~/.cache/weir/target), apart from the host build because another rustc may build it.
#
# Toolchain: rustup's wasm32-wasip2 target when it is installed; otherwise Debian's rustc-web
# with -Zbuild-std (scripts/setup.sh installs rustc-web cargo-web rust-web-src lld-22 wasi-libc).
set -euo pipefail

usage() { sed -n '2,13s/^# \{0,1\}//p' "$0"; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
profile=release
workspaces=()
for arg in "$@"; do
    case $arg in
        --release) profile=release ;;
        --debug) profile=debug ;;
        -h | --help) usage; exit 0 ;;
        -*) echo "build-plugins: unknown option $arg" >&2; usage >&2; exit 2 ;;
        *)
            if [[ -f $arg/Cargo.toml ]]; then workspaces+=("$(cd "$arg" && pwd)")
            elif [[ -f $repo/$arg/Cargo.toml ]]; then workspaces+=("$repo/$arg")
            else echo "build-plugins: no Cargo.toml in $arg" >&2; exit 2
            fi ;;
    esac
done
((${#workspaces[@]})) || workspaces=("$repo/plugins" "$repo/tests/guests")

# The toolchain, and the one cargo target directory (CARGO_TARGET_DIR) every script shares.
# shellcheck source=setup.sh
source "$repo/scripts/setup.sh" guests
out_dir=${WEIR_PLUGIN_DIR:-$repo/target/plugins}
target_dir=$CARGO_TARGET_DIR/guests
[[ $target_dir = /* ]] || target_dir=$PWD/$target_dir
[[ $out_dir = /* ]] || out_dir=$PWD/$out_dir
target=wasm32-wasip2

# --- toolchain -------------------------------------------------------------------------------
cargo_cmd=()
build_args=(--target "$target")
[[ $profile == release ]] && build_args+=(--release)

if weir_rustup_wasm; then
    route="rustup ($(rustc --version))"
    cargo_cmd=(cargo)
else
    route="debian ($(/usr/bin/rustc --version), -Zbuild-std)"
    cargo_cmd=(env RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 "RUSTFLAGS=-L /usr/lib/wasm32-wasi" /usr/bin/cargo)
    build_args+=(-Zbuild-std=std,panic_abort)
fi
echo "build-plugins: $profile build with $route, target dir $target_dir" >&2

# --- build -----------------------------------------------------------------------------------
mkdir -p "$out_dir"
declare -A built=() # crate name -> workspace that built it
status=0
for ws in "${workspaces[@]}"; do
    echo "build-plugins: building $ws" >&2
    messages=$(CARGO_TARGET_DIR=$target_dir "${cargo_cmd[@]}" build \
        --manifest-path "$ws/Cargo.toml" --workspace "${build_args[@]}" \
        --message-format=json-render-diagnostics)
    while IFS= read -r line; do
        [[ $line == *'"reason":"compiler-artifact"'* ]] || continue
        [[ $line =~ \"([^\"]+\.wasm)\" ]] || continue
        wasm=${BASH_REMATCH[1]}
        [[ $line =~ \"manifest_path\":\"([^\"]+)\" ]] || continue
        name=$(sed -n 's/^name[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "${BASH_REMATCH[1]}" | head -n1)
        if [[ -n ${built[$name]:-} ]]; then
            echo "build-plugins: crate $name is in both ${built[$name]} and $ws" >&2
            exit 1
        fi
        built[$name]=$ws
        # A component starts with \0asm, version 0x0d 0x00, layer 0x01 0x00; a core module has
        # version 0x01 0x00 0x00 0x00.
        header=$(head -c 8 "$wasm" | od -An -tx1 | tr -d ' \n')
        if [[ $header != 0061736d0d000100 ]]; then
            echo "build-plugins: $wasm is not a component (header $header)" >&2
            status=1
            continue
        fi
        dest=$out_dir/$name.wasm
        cp "$wasm" "$dest.tmp.$$"
        mv -f "$dest.tmp.$$" "$dest"
        printf '%-28s %9d bytes  %s\n' "$name.wasm" "$(stat -c %s "$dest")" "$dest"
    done <<<"$messages"
done
((${#built[@]})) || { echo "build-plugins: no cdylib crates found" >&2; exit 1; }
exit $status
