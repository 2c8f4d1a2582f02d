#!/usr/bin/env bash
# Builds a Go transform (a main package that calls weir.Export) into a weir:transform@0.2.0
# component:
#
#   guest-sdk/go/build.sh <package-dir> <out.wasm>
#
#  1. GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared: a WASI preview1 reactor core module
#     that exports the world's functions (the SDK implements the canonical ABI by hand);
#  2. cmd/weir-patch-core adds the non-Go allocators the component model needs (see there);
#  3. guest-sdk/js/bin/weir-wrap-core.js embeds the WIT world of the SDK the package builds with
#     (its contract's: wit/, or wit-0.1/ for a project's copy of an SDK from before 0.2) and
#     lifts the module into a component with the WASI preview1 reactor adapter that jco ships
#     (`npm ci` in guest-sdk/js if needed).
#
# Needs Go 1.24 or newer (//go:wasmexport) and Node.js 20.
set -euo pipefail

sdk=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if (($# != 2)); then
    sed -n '2,15s/^# \{0,1\}//p' "$0" >&2
    exit 2
fi
pkg=$(cd "$1" && pwd)
out=$2
[[ $out = /* ]] || out=$PWD/$out

source "$sdk/../../scripts/setup.sh" go # Go 1.24+
"$sdk/../js/install.sh"

cache=${WEIR_CACHE:-$HOME/.cache/weir}/polyglot
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache/bin" "$(dirname "$out")"
go build -C "$sdk" -o "$cache/bin/weir-patch-core" ./cmd/weir-patch-core
GOOS=wasip1 GOARCH=wasm go build -C "$pkg" -buildmode=c-shared -trimpath -o "$work/core.wasm" .
"$cache/bin/weir-patch-core" "$work/core.wasm" "$work/patched.wasm"
# The SDK the package builds with (its go.mod's replace: this SDK or a project's copy).
used=$(go -C "$pkg" list -m -f '{{if .Replace}}{{.Replace.Dir}}{{else}}{{.Dir}}{{end}}' example.invalid/weir/guest-sdk/go)
[[ $used = /* ]] || used=$pkg/$used
wit=$used/../wit
grep -q '^const Contract = "weir:transform@0\.1\.' "$used/weir.go" && wit=$used/../wit-0.1
node "$sdk/../js/bin/weir-wrap-core.js" "$work/patched.wasm" -o "$out" --wit "$wit/transform.wit"
