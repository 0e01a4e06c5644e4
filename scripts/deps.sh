#!/bin/sh
# Install the Debian packages mtc needs, if any are missing.
# `deps.sh fuzz` adds what `make fuzz` needs (clang and its libFuzzer runtime).
# As root (or with passwordless sudo) it runs apt-get; otherwise it prints the
# exact command to run and exits 1, changing nothing.
set -e
PKGS="cmake make gcc pkg-config git clang-format libopenblas-dev libcjson-dev libopenmpi-dev openmpi-bin libdnnl-dev fortunes iproute2 librsvg2-bin g++ libsentencepiece-dev sentencepiece python3-sentencepiece"
[ "$1" = fuzz ] && PKGS="$PKGS clang libclang-rt-dev"
# for bench/ only (not needed to build or test): python3-torch libtcmalloc-minimal4
# tests/ckpt/onnx_cli.sh runs onnx.checker when python3-onnx is installed
PKGS="$PKGS python3-onnx"
missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0
echo "mtc: installing missing packages:$missing" >&2
if [ "$(id -u)" = 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo"
else
    echo "mtc: missing packages; please run:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing
