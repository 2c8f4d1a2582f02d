#!/usr/bin/env bash
# Makes the release tarball target/dist/weir-<version>-<target>.tar.gz from the one host build
# (scripts/setup.sh) and the example plugins:
#
#   weir-<version>-<target>/
#     bin/weir                    the binary, debug info stripped (the guest SDKs are inside it)
#     LICENSE README.md BUILDING.md BENCHMARKS.md DESIGN.md docs/
#     examples/                   the example pipeline files, and flights/run.sh, the main job,
#                                 which runs from here against a broker you name
#     plugins/*.wasm              the example transforms the pipeline files name
#     data/nycflights13/          the flights and weather the examples read
#     share/systemd/              weir-serve.service and weir-run@.service (a pipeline per instance)
#
# The stripped debug info goes beside it, as target/dist/weir-<version>-<target>.debug, linked
# from the binary by `.gnu_debuglink` (gdb and perf find it when it sits next to the binary or in
# /usr/lib/debug). Prints the tarball's path.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
source scripts/setup.sh host guests

"${WEIR_HOST_BUILD[@]}"
scripts/build-plugins.sh plugins >&2
# It packs the working tree as it is: say so when that differs from a commit.
if changed=$(git status --porcelain 2>/dev/null) && [[ -n $changed ]]; then
    echo "dist: warning: packing uncommitted changes:" >&2
    printf '%s\n' "$changed" >&2
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
target=$(rustc -vV | sed -n 's/^host: //p')
name=weir-$version-$target
dist=$root/target/dist
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
out=$stage/$name
mkdir -p "$out/bin" "$out/plugins" "$out/share/systemd" "$out/data" "$dist"

objcopy --only-keep-debug "$CARGO_TARGET_DIR/release/weir" "$dist/$name.debug"
objcopy --strip-debug --add-gnu-debuglink="$dist/$name.debug" "$CARGO_TARGET_DIR/release/weir" "$out/bin/weir"
cp LICENSE README.md BUILDING.md BENCHMARKS.md DESIGN.md "$out/"
cp -r docs "$out/docs"
cp -r data/nycflights13 "$out/data/"
cp dist/systemd/*.service "$out/share/systemd/"
# Only the example plugins: the test guests of target/plugins are for the test suite.
for plugin in plugins/*/; do
    component=target/plugins/$(basename "$plugin").wasm
    [[ -f $component ]] && cp "$component" "$out/plugins/"
done
# Pipeline files name their components in the checkout's target/plugins; here they are in plugins/.
for file in examples/*/*.toml examples/observability/*; do
    mkdir -p "$out/$(dirname "$file")"
    sed 's|\.\./\.\./target/plugins/|../../plugins/|' "$file" >"$out/$file"
done
cp examples/flights/run.sh "$out/examples/flights/run.sh"

tar -C "$stage" -czf "$dist/$name.tar.gz.tmp" "$name"
mv -f "$dist/$name.tar.gz.tmp" "$dist/$name.tar.gz"
echo "$dist/$name.tar.gz"
