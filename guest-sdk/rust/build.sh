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

# Debian's rustc has no wasm32-wasip2 standard library: it is compiled from rust-web-src with
# -Zbuild-std, once per rustc into a sysroot laid out as rustup's target is, which every project
# then shares (compiling core/std/alloc in each project's own target dir took each new project a
# minute or more). Its profile is the templates': release, fat LTO (so the rlibs carry bitcode as
# well as object code, for LTO and non-LTO builds alike), panic = abort (wasm32-wasip2's only
# strategy). The host's rustlib dir is linked in for wasm-component-ld, which rustc looks for
# under the sysroot. Sets `sysroot`.
debian_sysroot() {
    local manifest='[package]
name = "weir-std"
version = "0.0.0"
edition = "2024"
publish = false
[lib]
path = "lib.rs"
[profile.release]
opt-level = 3
lto = true
codegen-units = 1
panic = "abort"
[workspace]'
    local key
    key=$({ /usr/bin/rustc -vV; printf '%s' "$manifest"; } | sha256sum | cut -c1-12)
    local dir=$CARGO_TARGET_DIR/guests/sysroot-$key
    [[ $dir = /* ]] || dir=$PWD/$dir
    if [[ ! -f $dir/complete ]]; then
        mkdir -p "$CARGO_TARGET_DIR/guests"
        (
            flock 9 # one build at a time; the others wait and take it
            if [[ ! -f $dir/complete ]]; then
                echo "weir-build-rust: compiling the wasm32-wasip2 standard library once for $(/usr/bin/rustc --version) into $dir" >&2
                rm -rf "$dir" && mkdir -p "$dir/crate" "$dir/lib/rustlib/wasm32-wasip2/lib"
                printf '%s\n' "$manifest" >"$dir/crate/Cargo.toml"
                : >"$dir/crate/lib.rs"
                CARGO_TARGET_DIR=$dir/target RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
                    RUSTFLAGS="-L /usr/lib/wasm32-wasi -C embed-bitcode=yes" /usr/bin/cargo build --quiet \
                    --manifest-path "$dir/crate/Cargo.toml" --release --target wasm32-wasip2 \
                    -Zbuild-std=std,panic_abort >&2
                find "$dir/target/wasm32-wasip2/release/deps" -name '*.rlib' ! -name 'libweir_std-*' \
                    -exec cp {} "$dir/lib/rustlib/wasm32-wasip2/lib/" \;
                ln -s /usr/lib/rustlib/x86_64-unknown-linux-gnu "$dir/lib/rustlib/x86_64-unknown-linux-gnu"
                rm -rf "$dir/target" "$dir/crate"
                touch "$dir/complete"
            fi
        ) 9>"$dir.lock"
    fi
    sysroot=$dir
}

build_args=(--target wasm32-wasip2)
[[ $profile == release ]] && build_args+=(--release)
if weir_rustup_wasm; then
    route="rustup ($(rustc --version))"
    cargo_cmd=(cargo)
else
    debian_sysroot
    route="debian ($(/usr/bin/rustc --version), std from $sysroot)"
    cargo_cmd=(env RUSTC=/usr/bin/rustc "RUSTFLAGS=-L /usr/lib/wasm32-wasi --sysroot $sysroot" /usr/bin/cargo)
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
