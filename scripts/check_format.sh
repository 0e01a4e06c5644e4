#!/bin/sh
# Fails (exit 1) when a tracked C file differs from .clang-format, naming
# each file and how to fix it. Run from anywhere inside the checkout.
set -e
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format not found (make deps installs it)" >&2; exit 1; }
bad=""
for f in $(git ls-files '*.c' '*.h'); do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad="$bad $f"
done
if [ -n "$bad" ]; then
    echo "check_format: these files differ from .clang-format (run: make format):" >&2
    for f in $bad; do echo "  $f" >&2; done
    exit 1
fi
echo "check_format: $(git ls-files '*.c' '*.h' | wc -l) files match .clang-format"
