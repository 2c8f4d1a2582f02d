#!/usr/bin/env bash
# Builds a JavaScript transform into a weir:transform@0.2.0 component with componentize-js:
#
#   guest-sdk/js/build.sh <entry.js> <out.wasm> [--aot]
#
# The entry module exports init/process/snapshot/restore/onTimer (`exportTransform(...)`) and may
# import other modules by relative path. Installs the pinned npm packages first if needed.
set -euo pipefail
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if (($# < 2)); then
    sed -n '2,8s/^# \{0,1\}//p' "$0" >&2
    exit 2
fi
"$dir/install.sh"
entry=$1 out=$2
shift 2
node "$dir/bin/weir-build-js.js" "$entry" -o "$out" "$@"
