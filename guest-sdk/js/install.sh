#!/usr/bin/env bash
# Installs guest-sdk/js's pinned npm packages (componentize-js, jco, wizer) with `npm ci` when
# node_modules is missing or older than package-lock.json.
set -euo pipefail
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$dir/../../scripts/setup.sh" node # Node.js 20+ and npm
stamp=$dir/node_modules/.weir-lock.sha256
want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
# One install at a time: builds started together would run `npm ci` over each other.
exec {lock}>"$dir/.install.lock"
flock "$lock"
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
    echo "weir-js: npm ci in $dir" >&2
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
    echo "$want" >"$stamp"
fi
