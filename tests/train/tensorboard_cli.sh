#!/bin/sh
# tests/train/tensorboard_cli.sh - `mtc train --tensorboard-dir` writes event
# files that an independent reader (tb_reader.mjs, written from the TFRecord
# and protobuf specifications) parses with every CRC checked, holding
# Megatron's scalars with the values of --metrics: lm loss, learning-rate,
# grad-norm, loss-scale, batch-size (and their "vs samples" against the
# consumed samples), "lm loss validation" (+ ppl), the timers with
# --log-timers-to-tensorboard and the memory with --log-memory-to-tensorboard;
# --tensorboard-log-interval thins them; a flipped byte is a CRC error; a
# file given as the folder is refused before training; the log names the
# event file; and --data-cache-path, --num-workers, --ckpt-format each get a
# note saying what they would do.
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
R="$MTC_SOURCE_DIR/tests/train/tb_reader.mjs"
B="--mock-data --vocab-size 64 --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 --global-batch-size 4 --train-iters 8 --eval-interval 4 --eval-iters 1 --threads 1 --lr 1e-3"
# shellcheck disable=SC2086
"$MTC" train $B --log-interval 1 --metrics "$D/m.jsonl" --tensorboard-dir "$D/tb/run1" --log-timers-to-tensorboard \
    --log-memory-to-tensorboard --log-validation-ppl-to-tensorboard --timing-log-level 1 --data-cache-path "$D/cache" \
    --num-workers 2 --ckpt-format torch_dist >"$D/t.log" 2>&1 || { bad "train"; cat "$D/t.log"; }
grep -q "> TensorBoard events: $D/tb/run1/events.out.tfevents." "$D/t.log" && ok "the log names the event file" || bad "no event file line"
for f in data-cache-path num-workers ckpt-format; do
    grep -q "note: --$f is accepted, " "$D/t.log" && ok "--$f: $(grep "note: --$f" "$D/t.log" | cut -c1-90)..." || bad "no note for --$f"
done
grep -q "tensorboard-dir.*concern GPUs" "$D/t.log" && bad "--tensorboard-dir still called a GPU matter" || true
node "$R" "$D/tb/run1" >"$D/ev.jsonl" 2>"$D/r.err" || { bad "reader: $(cat "$D/r.err")"; }
node - "$D/ev.jsonl" "$D/m.jsonl" <<'JS' && ok "every scalar matches --metrics" || bad "scalars"
const fs = require("fs");
const ev = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map(JSON.parse);
const m = fs.readFileSync(process.argv[3], "utf8").trim().split("\n").map(JSON.parse);
const assert = (c, msg) => { if (!c) { console.error(msg); process.exit(1); } };
assert(ev[0].file_version === "brain.Event:2" && ev[0].step === 0, "first record: " + JSON.stringify(ev[0]));
const at = (tag, step) => ev.filter((e) => e.tag === tag && e.step === step).map((e) => e.value);
const f32 = (x) => Math.fround(x);
const near = (a, b) => Math.abs(a - b) <= 1e-6 * Math.max(1, Math.abs(b));
let n = 0;
for (const r of m) {
  const it = r.iteration, samples = it * 4;
  if (r.lm_loss !== undefined) {
    for (const [tag, v] of [["lm loss", r.lm_loss], ["learning-rate", r.lr], ["grad-norm", r.grad_norm],
                            ["loss-scale", 1], ["batch-size", 4]]) {
      assert(at(tag, it).length === 1 && at(tag, it)[0] === f32(v), `${tag} at ${it}: ${at(tag, it)} vs ${v}`);
      assert(at(tag + " vs samples", samples)[0] === f32(v), `${tag} vs samples at ${samples}`);
      n++;
    }
    const alloc = r.param_bytes + r.grad_bytes + r.optim_state_bytes + r.activation_bytes;
    assert(at("mem-allocated-bytes", it)[0] === f32(alloc), `mem-allocated-bytes at ${it}: ${at("mem-allocated-bytes", it)} vs ${alloc}`);
    assert(at("mem-reserved-bytes", it)[0] > alloc, "mem-reserved-bytes below the allocation");
    assert(near(at("iteration-time", it)[0], r.elapsed_ms / 1000), `iteration-time at ${it}`);
    const fb = at("forward-backward-time", it);
    assert(fb.length === 1 && fb[0] > 0 && fb[0] <= r.elapsed_ms / 1000 * 1.01, `forward-backward-time at ${it}: ${fb}`);
    assert(at("throughput", it).length === 1, "throughput");
  }
  if (r.val_loss !== undefined) {
    assert(at("lm loss validation", it)[0] === f32(r.val_loss), `validation at ${it}`);
    assert(near(at("lm loss validation ppl", it)[0], Math.exp(Math.min(20, r.val_loss))), "ppl");
    assert(at("lm loss validation vs samples", samples)[0] === f32(r.val_loss), "validation vs samples");
    n++;
  }
}
assert(n === 8 * 5 + 2, "checked " + n + " scalars");
const tags = new Set(ev.map((e) => e.tag).filter(Boolean));
assert(!tags.has("mem-allocated-count"), "a count mtc does not have");
JS
# --tensorboard-log-interval 3: scalars at iterations 3 and 6 only
# shellcheck disable=SC2086
"$MTC" train $B --log-interval 4 --tensorboard-dir "$D/tb/run2" --tensorboard-log-interval 3 >"$D/t2.log" 2>&1 || bad "train 2"
node "$R" "$D/tb/run2" >"$D/ev2.jsonl" 2>&1 || bad "reader 2"
[ "$(grep '"tag":"lm loss"' "$D/ev2.jsonl" | sed 's/.*"step":\([0-9]*\).*/\1/' | tr '\n' ' ')" = "3 6 " ] &&
    ok "--tensorboard-log-interval 3: lm loss at 3 and 6" || { bad "interval"; grep '"lm loss"' "$D/ev2.jsonl"; }
# the reader checks the CRCs: a flipped byte in a copy is refused
f=$(ls "$D"/tb/run2/events.out.tfevents.*)
mkdir "$D/torn" && cp "$f" "$D/torn/" && g=$(ls "$D"/torn/*)
python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[60] ^= 1; open(p, "wb").write(b)' "$g"
node "$R" "$D/torn" >/dev/null 2>"$D/torn.err" && bad "a flipped byte passed" || ok "a flipped byte: $(cat "$D/torn.err")"
# a file where the folder should be: refused before training
: >"$D/file"
# shellcheck disable=SC2086
"$MTC" train $B --tensorboard-dir "$D/file" >"$D/t3.log" 2>&1
st=$?
[ $st -eq 2 ] && grep -q "tensorboard-dir" "$D/t3.log" && ! grep -q iteration "$D/t3.log" && ok "a file as --tensorboard-dir: $(tail -n 1 "$D/t3.log")" ||
    { bad "bad folder: exit $st"; tail -3 "$D/t3.log"; }
exit $fail
