#!/bin/sh
# Proves the repository needs nothing beside it: clones the committed tree
# into an empty temporary folder, builds it there and runs the unit- and
# grid-labelled tests from that clone (not the slow ones: the
# Release pass ran them; CI keeps to 25 minutes). A test that reads a file
# outside the repository (a ../something path, a file left in a developer's
# tree) fails here. The clone is removed on every exit path.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
# When this tree already is what the clone would be (no change or untracked
# file but the build outputs .gitignore names, and nothing beside it in its
# parent folder: CI's fresh clone), the `make test` just run from it was a
# standalone run and a second build would prove nothing new.
extra=$(git -C "$src" status --porcelain --ignored | grep -v -E '^!! (build/|build-[^/]*/|[^/]*\.(cmake|build)\.log)$' || true)
beside=$(ls -A "$src/.." | grep -v -x -F "$(basename "$src")" || true)
if [ -z "$extra" ] && [ -z "$beside" ]; then
    echo "check_standalone: $src is a clean clone with nothing beside it: the tests just run there were standalone"
    exit 0
fi
tmp=$(mktemp -d /tmp/mtc-standalone.XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
git clone --quiet "$src" "$tmp/mtc"
cd "$tmp/mtc"
echo "check_standalone: building a fresh clone of $(git rev-parse --short HEAD) in $tmp/mtc"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >build.cmake.log 2>&1 || { cat build.cmake.log; exit 1; }
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" >build.log 2>&1 || { tail -40 build.log; exit 1; }
cd build
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" -L 'unit|grid' -LE slow
