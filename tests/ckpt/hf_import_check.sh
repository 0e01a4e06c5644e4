#!/bin/sh
# tests/ckpt/hf_import_check.sh - `mtc import` validates what a Hugging Face
# folder holds before it trusts it: a safetensors header whose data_offsets
# overlap, alias another tensor, leave a hole, run past the end, are
# misaligned or fractional, or disagree with shape x dtype; NaN/Inf weights;
# a config.json with fewer layers than the weights (the extra tensors were
# dropped), one with a field of the wrong type or a size that does not fit
# (named by its config.json field); a shard that is a FIFO or a
# symlink out of the folder. Each is refused with exit 2 and one line
# naming the file and the tensor or field; the untouched export imports.
. "$MTC_SOURCE_DIR/tests/ckpt/ckpt_lib.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
T="--mock-data --vocab-size 64 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 --global-batch-size 4 --eval-iters 0 --threads 1"
"$MTC" train $T --train-iters 1 --save "$D/ck" >"$D/log" 2>&1 || { bad "save"; cat "$D/log"; }
"$MTC" export --load "$D/ck" --format safetensors --out "$D/hf" >"$D/log" 2>&1 || { bad "export"; cat "$D/log"; }
"$MTC" import --load "$D/hf" --save "$D/back" >"$D/log" 2>&1 && ok "the export imports" || { bad "import"; cat "$D/log"; }
# edit PYTHON: h (header dict), data (bytearray), cfg (config dict) of a copy in $D/c
edit() {
    rm -rf "$D/c" && cp -r "$D/hf" "$D/c"
    python3 - "$D/c" "$1" <<'PY'
import json, struct, sys
d, stmt = sys.argv[1], sys.argv[2]
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
data = bytearray(raw[8 + n:])
cfg = json.load(open(d + "/config.json"))
names = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])
exec(stmt)
text = json.dumps(h).encode()
text += b" " * (-len(text) % 8)
open(d + "/model.safetensors", "wb").write(struct.pack("<Q", len(text)) + text + bytes(data))
json.dump(cfg, open(d + "/config.json", "w"))
PY
}
# refused NAME PATTERN
refused() {
    timeout 60 "$MTC" import --load "$D/c" --save "$D/x" >"$D/out" 2>"$D/err"; st=$?
    if [ $st -eq 2 ] && [ "$(wc -l <"$D/err")" -eq 1 ] && grep -q -- "$2" "$D/err" && [ ! -e "$D/x" ]; then
        ok "$1: $(cut -c1-220 "$D/err")"
    else bad "$1 (exit $st)"; cat "$D/err"; fi
    rm -rf "$D/x"
}
edit 'a, b = names[0], names[1]; h[b]["data_offsets"] = [h[a]["data_offsets"][0], h[a]["data_offsets"][0] + h[b]["data_offsets"][1] - h[b]["data_offsets"][0]]'
refused "two tensors overlap" "overlap"
edit 'a = names[-1]; h["alias.weight"] = dict(h[a])'
refused "a tensor aliasing another" "overlap"
edit 'a = names[-1]; o = h[a]["data_offsets"]; h[a]["data_offsets"] = [o[0] + 4, o[1] + 4]; data.extend(b"\0" * 4)'
refused "a hole" "belong to no tensor (a hole)"
edit 'data.extend(b"\0" * 8)'
refused "bytes left over" "bytes left over"
edit 'a = names[-1]; o = h[a]["data_offsets"]; h[a]["data_offsets"] = [o[0] + 2, o[1] + 2]; data.extend(b"\0" * 2)'
refused "a misaligned tensor" "not a multiple of its 4-byte elements (misaligned)"
edit 'a = names[-1]; o = h[a]["data_offsets"]; h[a]["data_offsets"] = [o[0] + 0.5, o[1] + 0.5]'
refused "fractional offsets" "data_offsets that are not two byte offsets"
edit 'a = names[-1]; h[a]["shape"] = [h[a]["shape"][0] * 2] + h[a]["shape"][1:]'
refused "shape x dtype != bytes" "but shape x dtype is"
edit 'a = names[-1]; o = h[a]["data_offsets"]; h[a]["data_offsets"] = [o[0], o[1] + 4]'
refused "past the end" "but shape x dtype is"
edit 'a = names[-1]; o = h[a]["data_offsets"][0]; data[o:o + 4] = struct.pack("<f", float("nan"))'
refused "a NaN weight" "holds NaN at element 0 (weights must be finite)"
edit 'a = names[0]; o = h[a]["data_offsets"][0]; data[o:o + 4] = struct.pack("<f", float("inf"))'
refused "an Inf weight" "holds Inf at element 0"
edit 'cfg["n_layer"] = cfg.get("n_layer", 2) - 1; cfg["num_hidden_layers"] = cfg["n_layer"]'
refused "config.json with fewer layers than the weights (its own field named)" "which the model config.json describes has no place for (config.json does not match the weights: check n_layer and"
edit 'cfg["n_layer"] = str(cfg["n_layer"])'
refused "config.json n_layer a string" "n_layer is not a value its field can hold"
edit 'cfg["n_head"] = 2.5'
refused "config.json n_head 2.5" "n_head is not a value its field can hold"
edit 'cfg["tie_word_embeddings"] = "yes"'
refused "config.json tie_word_embeddings a string" "tie_word_embeddings is not a value"
# errors quote config.json's own field names, not mtc's flags
edit 'cfg["n_head"] = 5'
refused "config.json n_head 5 (n_embd 32)" "n_embd=32 is not divisible by n_head=5"
edit 'cfg["layer_norm_epsilon"] = -1'
refused "config.json layer_norm_epsilon -1" "layer_norm_epsilon=-1 must be in"
edit 'del cfg["n_embd"]'
refused "config.json without n_embd" "n_embd is missing (model_type gpt2 needs it)"
rm -rf "$D/c" && cp -r "$D/hf" "$D/c" && rm "$D/c/model.safetensors" && mkfifo "$D/c/model.safetensors"
refused "a FIFO shard" "is a FIFO, device or folder, not a regular file"
rm -rf "$D/c" && cp -r "$D/hf" "$D/c" && mv "$D/c/model.safetensors" "$D/out.safetensors" &&
    ln -s "$D/out.safetensors" "$D/c/model.safetensors"
refused "a shard linked out of the folder" "resolves to .*out.safetensors, outside"
exit $fail
