#!/bin/sh
# tests/ckpt/outputs_atomic_cli.sh - outputs are replaced whole or not at
# all. A safetensors export folder is written beside its target and renamed
# over it (a sharded re-export leaves no stale model.safetensors of the
# last one; a symlink at --out is replaced, its target untouched); on a full
# disk (a small tmpfs when this test may mount one, else a file-size limit:
# EFBIG instead of ENOSPC) the previous export, GGUF file, checkpoint,
# trace, metrics and preprocess outputs are intact, they still load, and no
# temporary is left. Bad --out values exit 2 before any work.
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
F="$D/full"
mkdir "$F"
cleanup() { umount "$F" 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
T="--mock-data --vocab-size 128 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --global-batch-size 4 --eval-iters 0 --threads 1 --log-interval 1"
"$MTC" train $T --train-iters 2 --save "$D/ck" >"$D/log" 2>&1 || { bad "base save"; cat "$D/log"; }
# leftovers DIR: hidden temporaries or *.tmp names
leftovers() { ls -A "$1" | grep -E '^\.mtc-|\.mtc-|\.tmp$' ; }

"$MTC" export --load "$D/ck" --format safetensors --out "$D/hf" >"$D/log" 2>&1 || { bad "export"; cat "$D/log"; }
"$MTC" export --load "$D/ck" --format safetensors --out "$D/hf" --max-shard-size 200000 >"$D/log" 2>&1 &&
    [ ! -e "$D/hf/model.safetensors" ] && [ -f "$D/hf/model.safetensors.index.json" ] &&
    [ -f "$D/hf/model-00001-of-00003.safetensors" ] &&
    ok "a sharded re-export replaces the folder whole (no stale model.safetensors)" ||
    { bad "sharded re-export: $(ls "$D/hf")"; cat "$D/log"; }
"$MTC" export --load "$D/ck" --format safetensors --out "$D/hf" >"$D/log" 2>&1 &&
    [ -f "$D/hf/model.safetensors" ] && [ ! -e "$D/hf/model.safetensors.index.json" ] &&
    [ ! -e "$D/hf/model-00001-of-00003.safetensors" ] && ok "an unsharded re-export drops the old shards" ||
    { bad "unsharded re-export: $(ls "$D/hf")"; cat "$D/log"; }
[ -z "$(leftovers "$D")" ] && ok "no temporaries beside the export" || bad "left: $(leftovers "$D")"
mkdir "$D/target"
echo keep >"$D/target/keep.txt"
ln -s "$D/target" "$D/link"
"$MTC" export --load "$D/ck" --format safetensors --out "$D/link" >"$D/log" 2>&1 &&
    [ -d "$D/link" ] && [ ! -L "$D/link" ] && [ -f "$D/link/config.json" ] &&
    [ "$(ls "$D/target")" = keep.txt ] && ok "a symlink at --out is replaced, its target untouched" ||
    { bad "symlink --out"; cat "$D/log"; ls -la "$D"; }
ln -s /dev/null "$D/devlink"
"$MTC" export --load "$D/ck" --format gguf --out "$D/devlink" >"$D/log" 2>&1 &&
    [ -f "$D/devlink" ] && [ ! -L "$D/devlink" ] && [ -c /dev/null ] &&
    ok "gguf --out over a symlink to a device replaces the link" || { bad "gguf symlink"; cat "$D/log"; }

# --metrics through a symlink: the link is replaced, its target untouched
echo precious >"$D/precious"
ln -s "$D/precious" "$D/m.jsonl"
"$MTC" train $T --train-iters 2 --metrics "$D/m.jsonl" >"$D/log" 2>&1 && [ ! -L "$D/m.jsonl" ] &&
    grep -q '"iteration": 2' "$D/m.jsonl" && [ "$(cat "$D/precious")" = precious ] &&
    ok "a symlink at --metrics is replaced, its target untouched" || { bad "symlink --metrics"; cat "$D/log"; }

# refused NAME PATTERN OUT: export --out OUT exits 2 at once, one line
refused() {
    timeout 30 "$MTC" export --load "$D/ck" --format safetensors --out "$3" >"$D/out" 2>"$D/err"; st=$?
    if [ $st -eq 2 ] && [ "$(wc -l <"$D/err")" -eq 1 ] && grep -q -- "$2" "$D/err" && [ ! -s "$D/out" ]; then
        ok "$1: $(cat "$D/err")"
    else bad "$1: exit $st"; cat "$D/err"; fi
}
mkfifo "$D/fifo"
: >"$D/afile"
mkdir "$D/mine"
echo notes >"$D/mine/notes.txt"
refused "--out empty" "needs a folder name" ""
refused "--out FIFO" "exists and is not a folder" "$D/fifo"
refused "--out device" "exists and is not a folder" /dev/null
refused "--out a file" "exists and is not a folder" "$D/afile"
refused "--out missing parent" "does not exist (create it first)" "$D/nope/hf"
refused "--out a folder of other files" "holds notes.txt" "$D/mine"
# a folder access() calls writable (root) where no folder can be made: probed before work
[ -d /proc/self ] && refused "--out inside /proc" "cannot create a folder in /proc" /proc/mtc-hf
[ -f "$D/mine/notes.txt" ] && [ -p "$D/fifo" ] && ok "refused outputs untouched" || bad "a refused output changed"

# a full disk
if mount -t tmpfs -o size=1m tmpfs "$F" 2>/dev/null; then
    how="a 1 MiB tmpfs"
    # squeeze KB CMD...: CMD with KB KiB left free on $F
    squeeze() {
        kb=$1; shift
        rm -f "$F/fill"
        free=$(df -k "$F" | awk 'NR == 2 { print $4 }')
        [ "$free" -gt "$kb" ] && dd if=/dev/zero of="$F/fill" bs=1k count=$((free - kb)) 2>/dev/null
        "$@"; st=$?
        rm -f "$F/fill"
        return $st
    }
else # not allowed to mount: a file-size limit fails the writes the same way (EFBIG)
    how="a file-size limit (no tmpfs: not root)"
    squeeze() { kb=$1; shift; (trap '' XFSZ; ulimit -f $((kb * 2)); "$@"); }
fi
"$MTC" export --load "$D/ck" --format safetensors --out "$F/hf" >"$D/log" 2>&1 || { bad "export to $how"; cat "$D/log"; }
cp -r "$F/hf" "$D/hf.before"
squeeze 300 "$MTC" export --load "$D/ck" --format safetensors --out "$F/hf" --max-shard-size 200000 >"$D/log" 2>"$D/err"; st=$?
[ $st -eq 1 ] && diff -r "$D/hf.before" "$F/hf" >/dev/null && [ -z "$(leftovers "$F")" ] &&
    ok "export on a full disk ($how): exit $st, old folder intact, nothing left: $(tail -1 "$D/err" | cut -c1-160)" ||
    { bad "export on a full disk: exit $st, left $(leftovers "$F")"; cat "$D/err"; }
"$MTC" import --load "$F/hf" --save "$D/back" >"$D/log" 2>&1 && ok "the old export still imports" ||
    { bad "old export import"; cat "$D/log"; }
rm -rf "$D/hf.before" "$F/hf"
"$MTC" export --load "$D/ck" --format gguf --out "$F/m.gguf" >"$D/log" 2>&1 || { bad "gguf"; cat "$D/log"; }
cp "$F/m.gguf" "$D/m.gguf"
squeeze 100 "$MTC" export --load "$D/ck" --format gguf --out "$F/m.gguf" >"$D/log" 2>"$D/err"; st=$?
[ $st -eq 1 ] && cmp -s "$D/m.gguf" "$F/m.gguf" && [ -z "$(leftovers "$F")" ] &&
    ok "gguf on a full disk: exit $st, old file intact, nothing left" ||
    { bad "gguf on a full disk: exit $st, left $(leftovers "$F")"; cat "$D/err"; }
rm -f "$F/m.gguf"
# checkpoints, traces, metrics and preprocess outputs: nothing temporary is left
squeeze 100 "$MTC" train $T --train-iters 4 --save "$F/ck" --save-interval 2 >"$D/log" 2>"$D/err"; st=$?
[ $st -eq 1 ] && [ -z "$(leftovers "$F")" ] && [ -z "$(ls -A "$F/ck" 2>/dev/null | grep -v '^latest\|^iter_[0-9]*$')" ] &&
    ok "train --save on a full disk: exit $st, no temporary left: $(tail -1 "$D/err" | cut -c1-150)" ||
    { bad "train --save on a full disk: exit $st, left $(ls -A "$F" "$F/ck")"; tail -2 "$D/err"; }
rm -rf "$F/ck"
squeeze 0 "$MTC" train $T --train-iters 2 --trace "$F/t.json" >"$D/log" 2>"$D/err"; st=$?
[ $st -eq 1 ] && [ -z "$(leftovers "$F")" ] && [ ! -e "$F/t.json" ] &&
    ok "train --trace on a full disk: exit $st, nothing left" || { bad "trace on a full disk: exit $st, left $(ls -A "$F")"; tail -2 "$D/err"; }
"$MTC" train $T --train-iters 2 --metrics "$F/m.jsonl" >"$D/log" 2>&1 || { bad "metrics"; cat "$D/log"; }
cp "$F/m.jsonl" "$D/m.before"
squeeze 0 "$MTC" train $T --train-iters 40 --metrics "$F/m.jsonl" >"$D/log" 2>"$D/err"; st=$?
[ $st -eq 1 ] && cmp -s "$D/m.before" "$F/m.jsonl" && [ -z "$(leftovers "$F")" ] &&
    ok "train --metrics on a full disk: exit $st, old file intact, nothing left" ||
    { bad "metrics on a full disk: exit $st, left $(ls -A "$F")"; tail -2 "$D/err"; }
rm -f "$F/m.jsonl"
for k in $(seq 400); do echo '{"text": "hello world, a few more words to fill the disk"}'; done >"$D/in.jsonl"
squeeze 8 "$MTC" preprocess --input "$D/in.jsonl" --output-prefix "$F/p" --tokenizer-type ByteLevelTokenizer >"$D/log" 2>"$D/err"; st=$?
[ $st -eq 1 ] && [ -z "$(leftovers "$F")" ] && [ ! -e "$F/p_text_document.bin" ] &&
    ok "preprocess on a full disk: exit $st, nothing left" || { bad "preprocess on a full disk: exit $st, left $(ls -A "$F")"; tail -2 "$D/err"; }
exit $fail
