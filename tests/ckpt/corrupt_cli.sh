#!/bin/sh
# tests/ckpt/corrupt_cli.sh - damaged checkpoints are refused, never loaded
# and never crash the loader (this test also runs under AddressSanitizer:
# make test-asan). For each file kind (the tracker, metadata.json, its
# checksum, each rank's data file) a flipped byte, a truncation and an
# empty file; then metadata.json edited and re-signed (a wrong dtype, a
# wrong global shape, a piece outside its tensor, a missing tensor, a
# missing data file). Each must exit 2 with one message naming the file
# (and the tensor for data files), before training starts.
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
T="$TINY --world-size 2 --tp 2"
"$MTC" train $T --train-iters 2 --save "$D/base" >"$D/base.log" 2>&1 || { bad "base save"; cat "$D/base.log"; }
I=iter_0000002
# refused NAME PATTERN: load $D/c and expect exit 2 and PATTERN on stderr
refused() {
    "$MTC" train $T --train-iters 3 --load "$D/c" >"$D/out" 2>"$D/err"
    st=$?
    if [ $st -eq 2 ] && grep -q -- "$2" "$D/err" && ! grep -q "iteration        3/" "$D/out"; then
        ok "$1: $(grep "error" "$D/err" | head -n 1 | cut -c1-200)"
    else
        bad "$1 (exit $st)"
        cat "$D/err"
    fi
}
fresh() { rm -rf "$D/c" && cp -r "$D/base" "$D/c"; }
flip() { # FILE OFFSET: invert one byte
    python3 -c 'import sys
p, o = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, "rb").read()); o = min(o, len(b) - 1); b[o] ^= 0xff
open(p, "wb").write(bytes(b))' "$1" "$2"
}
half() { python3 -c 'import sys; p = sys.argv[1]; b = open(p, "rb").read(); open(p, "wb").write(b[: len(b) // 2])' "$1"; }
size() { wc -c <"$1"; }

fresh; echo "12x" >"$D/c/latest_checkpointed_iteration.txt"
refused "tracker garbage" "latest_checkpointed_iteration.txt does not hold an iteration number"
fresh; : >"$D/c/latest_checkpointed_iteration.txt"
refused "tracker empty" "latest_checkpointed_iteration.txt does not hold an iteration number"
fresh; echo 7 >"$D/c/latest_checkpointed_iteration.txt"
refused "tracker names a missing iteration" "iter_0000007/metadata.json cannot be read"
for f in metadata.json metadata.json.crc32c; do
    fresh; flip "$D/c/$I/$f" $(($(size "$D/c/$I/$f") / 2))
    refused "$f flipped" "metadata.json does not match its checksum"
    fresh; half "$D/c/$I/$f"
    refused "$f truncated" "metadata.json does not match its checksum"
    fresh; : >"$D/c/$I/$f"
    refused "$f empty" "metadata.json does not match its checksum"
    fresh; rm "$D/c/$I/$f"
    refused "$f missing" "cannot be read"
done
for r in 0 1; do
    f=__$r.distcp
    for at in 0 $(($(size "$D/base/$I/$f") / 2)) $(($(size "$D/base/$I/$f") - 1)); do
        fresh; flip "$D/c/$I/$f" $at
        refused "$f byte $at flipped" "$I/$f: tensor .* do not match their checksum"
    done
    fresh; half "$D/c/$I/$f"
    refused "$f truncated" "$I/$f is [0-9]* bytes but tensor .* needs bytes up to [0-9]* (a truncated file"
    fresh; : >"$D/c/$I/$f"
    refused "$f empty" "$I/$f is 0 bytes but tensor"
    fresh; rm "$D/c/$I/$f"
    refused "$f missing" "$I/$f (tensor .*) cannot be opened"
done
# edit metadata.json and re-sign it: the loader's own checks, not the checksum
edit() { # PYTHON-STATEMENT on m (the parsed metadata)
    python3 - "$D/c/$I/metadata.json" "$1" <<'PY'
import json, sys
path, stmt = sys.argv[1], sys.argv[2]
m = json.load(open(path))
t = m["tensors"]
exec(stmt)
text = json.dumps(m, indent=1).encode()
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF
open(path, "wb").write(text)
open(path + ".crc32c", "w").write("%08x\n" % crc32c(text))
PY
}
fresh; edit 't["transformer.wte.weight"]["dtype"] = "bfloat16"'
refused "a dtype" "tensor transformer.wte.weight has a dtype other than float32"
fresh; edit 't["transformer.h.0.mlp.c_fc.weight"]["global_shape"] = [256, 32]'
refused "a global shape" "tensor transformer.h.0.mlp.c_fc.weight is (256, 32) but this model's is (128, 32)"
fresh; edit 't["transformer.h.1.ln_1.weight"]["pieces"][0]["offset"] = [30, 0]'
refused "a piece outside its tensor" "tensor transformer.h.1.ln_1.weight has a piece outside its tensor"
fresh; edit 'del t["transformer.h.1.attn.c_proj.weight"]'
refused "a missing tensor" "holds no tensor transformer.h.1.attn.c_proj.weight"
fresh; edit 't["transformer.h.1.attn.c_proj.weight"]["pieces"].pop()'
refused "a missing piece" "tensor transformer.h.1.attn.c_proj.weight covers 0 of the 512 elements this rank needs"
fresh; edit 't["transformer.h.0.ln_2.bias"]["pieces"][0]["byte_range"][1] += 4'
refused "a wrong byte count" "tensor transformer.h.0.ln_2.bias has a piece outside its tensor or with a wrong byte count"
fresh; edit 't["transformer.h.0.ln_2.bias"]["pieces"][0]["file"] = "../x"'
refused "a path in a file name" "tensor transformer.h.0.ln_2.bias has a piece in a bad file name"
fresh; edit 't["transformer.h.4.ln_1.weight"] = t["transformer.h.1.ln_1.weight"]'
refused "an extra tensor" "holds tensor transformer.h.4.ln_1.weight, which this model has no place for"
fresh; edit 't["optimizer.exp_avg.transformer.h.9.ln_1.bias"] = t["transformer.h.1.ln_1.bias"]'
refused "an extra optimizer state" "holds tensor optimizer.exp_avg.transformer.h.9.ln_1.bias, which"
"$MTC" generate --load "$D/c" --prompt-ids 1,2 --max-new-tokens 1 >"$D/out" 2>"$D/err"; st=$?
[ $st -eq 2 ] && grep -q "which this model has no place for" "$D/err" && ok "generate: an extra tensor refused" ||
    { bad "generate of an extra tensor (exit $st)"; cat "$D/err"; }
fresh; edit 'm["common"]["model"]["num_layers"] = 2.5'
refused "a bad configuration" "num_layers=2.5, which is not an integer"
fresh; edit 'm["format"] = "other"'
refused "another format" "is not an mtc checkpoint index"
fresh; edit 'm["common"]["rng"]["seed"] = "abc"'
refused "seed abc" "common.rng.seed (a decimal string"
fresh; edit 'm["common"]["iteration"] = 2.5'
refused "iteration 2.5" "common.iteration (an integer equal to the folder's iteration)"
fresh; edit 'm["common"]["consumed_samples"] = -4'
refused "consumed_samples -4" "common.consumed_samples (an integer >= 0)"
fresh; edit 'm["common"]["model"]["normalization"] = "BatchNorm"'
refused "an unknown normalization" "normalization=BatchNorm (known: LayerNorm, RMSNorm"
fresh; edit 'm["common"]["model"]["position_embedding_type"] = "alibi"'
refused "an unknown position embedding" "position_embedding_type=alibi (known"
# a piece that is a FIFO is refused at once (its open used to wait for a
# writer forever), one that is a symlink out of the checkpoint is refused
fresh; rm "$D/c/$I/__1.distcp"; mkfifo "$D/c/$I/__1.distcp"
timeout 60 "$MTC" train $T --train-iters 3 --load "$D/c" >"$D/out" 2>"$D/err"; st=$?
[ $st -eq 2 ] && grep -q "__1.distcp is a FIFO, not a regular file" "$D/err" && ok "a FIFO piece refused" ||
    { bad "a FIFO piece (exit $st)"; cat "$D/err"; }
timeout 60 "$MTC" export --load "$D/c" --format safetensors --out "$D/hf" >"$D/out" 2>"$D/err"; st=$?
[ $st -eq 2 ] && grep -q "is a FIFO, not a regular file" "$D/err" && ok "export of a FIFO piece refused" ||
    { bad "export of a FIFO piece (exit $st)"; cat "$D/err"; }
fresh; mv "$D/c/$I/__0.distcp" "$D/outside.distcp"; ln -s "$D/outside.distcp" "$D/c/$I/__0.distcp"
refused "a piece linked out of the checkpoint" "__0.distcp resolves to .*outside.distcp, outside"
exit $fail
