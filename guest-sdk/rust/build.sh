#!/usr/bin/env bash
# Builds one Rust transform crate (a `cdylib` that uses weir-guest) into a WebAssembly component
# (wasm32-wasip2):
#
#   guest-sdk/rust/build.sh [--debug] <crate-dir> <out.wasm>
#
# <crate-dir> holds the crate's Cargo.toml (it may be a member of a workspace). Cargo target dir:
# $CARGO_TARGET_DIR/guests/<workspace>-<hash of its path> (scripts/setup.sh's default
# CARGO_TARGET_DIR is ~/.cache/weir/target): one per cargo workspace, apart from the host build
# because another rustc may build it.
#
# Toolchain: rustup's wasm32-wasip2 target when it is installed; otherwise Debian's rustc-web
# with -Zbuild-std (scripts/setup.sh installs rustc-web cargo-web rust-web-src lld-22 wasi-libc).
set -euo pipefail

sdk=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() { sed -n '2,12s/^# \{0,1\}//p' "$0"; }
profile=release
if [[ ${1:-} == --debug ]]; then profile=debug; shift; fi
if (($# != 2)) || [[ ! -f $1/Cargo.toml ]]; then usage >&2; exit 2; fi
manifest=$(cd "$1" && pwd -P)/Cargo.toml # as cargo reports it: symbolic links resolved
out=$2
[[ $out = /* ]] || out=$PWD/$out

# The toolchain, and the one cargo target directory (CARGO_TARGET_DIR) every script shares.
# shellcheck source=../../scripts/setup.sh
source "$sdk/../../scripts/setup.sh" guests
# One target dir per workspace: cargo tells path packages apart by their path relative to their
# workspace root, so two projects named alike (two `weir transform init greeter`) sharing one
# would each take the other's build as their own.
root=$(dirname "$manifest")
for dir in "$root" "$(dirname "$root")" "$(dirname "$(dirname "$root")")"; do
    if grep -qs '^\[workspace\]' "$dir/Cargo.toml"; then root=$dir; break; fi
done
target_dir=$CARGO_TARGET_DIR/guests/$(basename "$root")-$(printf '%s' "$root" | sha256sum | cut -c1-12)
[[ $target_dir = /* ]] || target_dir=$PWD/$target_dir

build_args=(--target wasm32-wasip2)
[[ $profile == release ]] && build_args+=(--release)
if weir_rustup_wasm; then
    route="rustup ($(rustc --version))"
    cargo_cmd=(cargo)
else
    route="debian ($(/usr/bin/rustc --version), -Zbuild-std)"
    cargo_cmd=(env RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 "RUSTFLAGS=-L /usr/lib/wasm32-wasi" /usr/bin/cargo)
    build_args+=(-Zbuild-std=std,panic_abort)
fi
echo "weir-build-rust: $profile build of $manifest with $route, target dir $target_dir" >&2

messages=$(CARGO_TARGET_DIR=$target_dir "${cargo_cmd[@]}" build --manifest-path "$manifest" \
    "${build_args[@]}" --message-format=json-render-diagnostics)
# The crate's own cdylib artifact (dependencies are rlibs).
wasm=
while IFS= read -r line; do
    [[ $line == *'"reason":"compiler-artifact"'* && $line == *"\"manifest_path\":\"$manifest\""* ]] || continue
    [[ $line =~ \"([^\"]+\.wasm)\" ]] && wasm=${BASH_REMATCH[1]}
done <<<"$messages"
if [[ -z $wasm ]]; then
    echo "weir-build-rust: $manifest built no .wasm file: is its [lib] crate-type [\"cdylib\"]?" >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"
cp "$wasm" "$out.tmp.$$"
mv -f "$out.tmp.$$" "$out"
