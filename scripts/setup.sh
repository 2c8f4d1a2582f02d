#!/usr/bin/env bash
# The one set-up of a machine for Weir, shared by the README's commands (examples/flights/run.sh,
# scripts/test.sh), .ci/run and the build scripts, so that no install list is written twice:
#
#   source scripts/setup.sh PART...      (from a script: also sets CARGO_TARGET_DIR, below)
#   bash scripts/setup.sh PART...
#   bash scripts/setup.sh --print-target-dir
#
# Parts (name them: a sourced script without arguments would see its caller's):
#   host      C/C++ toolchain, libclang (RocksDB's bindgen), zlib, OpenSSL, libcurl and pkg-config
#             (librdkafka with TLS, SASL/SCRAM and OAUTHBEARER's OIDC flow);
#             Rust itself (cargo 1.95+) comes from rustup
#   guests    the wasm32-wasip2 Rust toolchain: rustup's target when installed, else Debian's
#             rustc-web cargo-web rust-web-src lld-22 wasi-libc
#   python    Python 3 with venv    pytest  pytest    node  Node.js 20+ with npm    go  Go 1.24+
#   polyglot  python pytest node go (the SDKs' tests and builds)
#   kafka     Java 17+, Maven (scripts/kafka.sh fetches the broker from Maven Central) and openssl
#   postgres  Debian's postgresql (PostgreSQL 15): scripts/postgres.sh runs a throwaway cluster
#             from its binaries on port 5433; the system cluster 15/main the package may create
#             and start on 5432 is not used
#   browser   Debian's chromium and chromium-driver (the dashboard's browser test drives them
#             headless through WebDriver; test frameworks' own browser downloads are not used)
#
# Missing Debian packages are installed with apt-get (as root, or through sudo otherwise); a tool
# apt cannot provide in a usable version stops the set-up with a message saying what to install.
#
# It also fixes the one cargo target directory and the one host build every script shares, so
# that no command invalidates another's artifacts: CARGO_TARGET_DIR (default
# ~/.cache/weir/target, outside the clone so that it outlives the clone) is exported, and
# WEIR_HOST_BUILD holds the host build command.
set -euo pipefail

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/weir/target}"
# The release profile with every target, as CI builds it: tests, benches and the CLI at once.
WEIR_HOST_BUILD=(cargo build --release --workspace --all-targets)

weir_setup() {
    local parts=("${@/#polyglot/python pytest node go}") packages=() missing=() problems=() package part
    ((${#parts[@]})) || { echo "setup: name the parts to set up (host guests polyglot kafka ...)" >&2; return 2; }
    # shellcheck disable=SC2068 # "polyglot" expands to four words
    for part in ${parts[@]}; do
        case $part in
            host)
                packages+=(build-essential libclang-dev zlib1g-dev libssl-dev libcurl4-openssl-dev pkg-config)
                command -v cargo >/dev/null ||
                    problems+=("no cargo: install Rust 1.95+ with rustup (https://rustup.rs)")
                ;;
            guests)
                if ! weir_rustup_wasm; then
                    packages+=(rustc-web cargo-web rust-web-src lld-22 wasi-libc)
                fi
                ;;
            python)
                python3 -c 'import venv, ensurepip' 2>/dev/null || packages+=(python3-venv)
                ;;
            pytest)
                if ! python3 -c 'import pytest' 2>/dev/null; then
                    if [[ $(command -v python3 || echo /usr/bin/python3) == /usr/bin/python3 ]]; then
                        packages+=(python3-pytest)
                    else
                        problems+=("$(command -v python3) has no pytest: python3 -m pip install pytest")
                    fi
                fi
                ;;
            node)
                weir_version_at_least "$(node --version 2>/dev/null | tr -d v)" 20 ||
                    problems+=("Node.js 20+ is needed (Debian 12 ships 18: use NodeSource's nodejs 20 packages)")
                command -v npm >/dev/null || packages+=(npm)
                ;;
            go)
                weir_version_at_least "$(go env GOVERSION 2>/dev/null | sed 's/^go//')" 1.24 ||
                    problems+=("Go 1.24+ is needed (//go:wasmexport): install it from https://go.dev/dl")
                ;;
            kafka)
                command -v "${JAVA_HOME:+$JAVA_HOME/bin/}java" >/dev/null || packages+=(openjdk-17-jre-headless)
                command -v mvn >/dev/null || packages+=(maven)
                # kafka.sh makes the test broker's TLS certificates with openssl.
                command -v openssl >/dev/null || packages+=(openssl)
                ;;
            postgres)
                packages+=(postgresql)
                ;;
            browser)
                packages+=(chromium chromium-driver)
                ;;
            *)
                echo "setup: unknown part $part (host, guests, python, pytest, node, go, polyglot, kafka, postgres, browser)" >&2
                return 2
                ;;
        esac
    done
    for package in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep 'install ok installed' > /dev/null || missing+=("$package")
    done
    if ((${#missing[@]})); then
        weir_apt_install "${missing[@]}" || return 1
    fi
    if ((${#problems[@]})); then
        printf 'setup: %s\n' "${problems[@]}" >&2
        return 1
    fi
    mkdir -p "$CARGO_TARGET_DIR"
}

# weir_cli: runs the host build (WEIR_HOST_BUILD: nothing to do when it is built) and sets WEIR_CLI
# to its `weir`, for the scripts that build the repository's transforms with `weir transform
# build`. Those import the SDKs in place, by relative path, so WEIR_SDK_DIR points `weir` at this
# checkout's guest-sdk rather than at the copy built into it.
weir_cli() {
    "${WEIR_HOST_BUILD[@]}" >&2
    WEIR_CLI=$CARGO_TARGET_DIR/release/weir
    WEIR_SDK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../guest-sdk" && pwd)
    export WEIR_SDK_DIR
}

# weir_serve WEIR CONFIG LOG: starts `WEIR serve --config CONFIG` (the admin token from
# $WEIR_ADMIN_TOKEN) logging to LOG, kills it when the calling script exits, and waits until it
# serves; sets WEIR_SERVE_PID. Exits the script when the server dies first.
weir_serve() {
    "$1" serve --config "$2" > "$3" 2>&1 &
    WEIR_SERVE_PID=$!
    trap "kill $WEIR_SERVE_PID 2>/dev/null || true" EXIT
    until grep -q "serving the API" "$3"; do
        kill -0 "$WEIR_SERVE_PID" 2>/dev/null || { echo "weir serve exited:" >&2; tail -n 20 "$3" >&2; exit 1; }
        sleep 0.5
    done
}

# Whether rustup's wasm32-wasip2 target is installed (then no Debian wasm toolchain is needed).
weir_rustup_wasm() {
    command -v rustup >/dev/null 2>&1 && rustup target list --installed 2>/dev/null | grep -x wasm32-wasip2 > /dev/null
}

# weir_version_at_least VERSION MINIMUM: whether VERSION (empty when the tool is missing) is at
# least MINIMUM, compared as dotted numbers.
weir_version_at_least() {
    [[ -n $1 ]] && printf '%s\n' "$2" "$1" | sort -V -C
}

weir_apt_install() {
    command -v apt-get >/dev/null || {
        echo "setup: missing packages $* and no apt-get to install them; install them by hand" >&2
        return 1
    }
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || {
            echo "setup: missing packages $*: run this as root or install sudo (apt-get install $*)" >&2
            return 1
        }
        sudo=(sudo)
    fi
    echo "setup: installing $*" >&2
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$@" >&2
}

if [[ ${1:-} == --print-target-dir ]]; then
    echo "$CARGO_TARGET_DIR"
    # Sourced, this ends only the sourcing; run, it ends the script.
    return 0 2>/dev/null || exit 0
fi
weir_setup "$@"
