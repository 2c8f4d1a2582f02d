#!/usr/bin/env bash
# Builds a Python transform into a weir:transform@0.2.0 component with componentize-py.
#
#   guest-sdk/python/build.sh <app-dir> <module> <out.wasm>
#
# <app-dir> holds <module>.py (or a package), whose top level binds `WitWorld = export(...)`.
# componentize-py bundles CPython, the standard library, weir_guest and the app, and
# pre-initialises the interpreter (importing the app) at build time.
#
# componentize-py comes from a venv in ${WEIR_CACHE:-~/.cache/weir}/polyglot/venv, created
# here with the version pinned in requirements-build.txt when it is missing.
set -euo pipefail

sdk=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if (($# != 3)); then
    sed -n '2,11s/^# \{0,1\}//p' "$0" >&2
    exit 2
fi
app_dir=$(cd "$1" && pwd)
module=$2
out=$3
[[ $out = /* ]] || out=$PWD/$out

cache=${WEIR_CACHE:-$HOME/.cache/weir}/polyglot
venv=$cache/venv
pin=$(sed -n 's/^componentize-py==//p' "$sdk/requirements-build.txt")

# One install at a time: builds started together (several projects, test threads) would create
# the venv twice, or reinstall componentize-py under one that is running.
mkdir -p "$cache"
exec {lock}>"$cache/.install.lock"
flock "$lock"
if [[ $("$venv/bin/componentize-py" --version 2>/dev/null) != "componentize-py $pin" ]]; then
    echo "weir-build-py: installing componentize-py $pin into $venv" >&2
    source "$sdk/../../scripts/setup.sh" python # venv and ensurepip
    [[ -x $venv/bin/pip ]] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$sdk/requirements-build.txt" >&2
fi
flock -u "$lock"

# The app's own copy of the SDK and its WIT (weir-sdk/, as `weir transform init` writes it)
# when it has one, else this SDK.
bundled=$sdk
[[ -d $app_dir/weir-sdk/python/weir_guest ]] && bundled=$app_dir/weir-sdk/python
# The WIT of that SDK's contract: 0.2, or 0.1 for a project's copy of an SDK from before 0.2.
wit=$bundled/../wit
grep -q '^CONTRACT = "weir:transform@0\.1\.' "$bundled/weir_guest/__init__.py" && wit=$bundled/../wit-0.1

mkdir -p "$(dirname "$out")"
# Run from the app folder, with no virtualenv in the environment, so that componentize-py
# bundles the app, the SDK and the standard library only.
cd "$app_dir"
env -u VIRTUAL_ENV "$venv/bin/componentize-py" -d "$wit" -w transform \
    componentize -p "$app_dir" -p "$bundled" "$module" -o "$out.tmp" >&2
mv -f "$out.tmp" "$out"
