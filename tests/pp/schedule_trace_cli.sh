#!/bin/sh
# tests/pp/schedule_trace_cli.sh - `mtc schedule --from-trace`: the schedule
# a training run executed, read back from its --trace file.
#  - interleaved (pp 2, vpp 2, tp 2) and 1F1B (pp 4): every rank ran the
#    order `mtc schedule` plans (the text says so for each rank, and the ops
#    equal the planned --json order); bubbles are shares in [0, 1);
#  - the SVG is well-formed, has one box per executed op of each rank, the
#    boxes of a rank do not overlap and lie inside its forward-backward span
#    (the grey background), and each row's bubble is the text's;
#  - --iteration picks a traced iteration; one outside the trace, a file that
#    is not a trace, a missing file and --microbatches with --from-trace exit 2;
#  - the trace's memory bound (mtc train --trace-buffer-mb): a bounded run of
#    the 1F1B layout keeps a valid file whose otherData counts the dropped
#    events per rank, kept + dropped equals the unbounded run's events on
#    every rank, stderr warns with the total, and --from-trace notes it;
#    --trace-buffer-mb 0 exits 2.
set -u
MTC=${MTC:?set MTC to the mtc binary}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
TINY="--mock-data --vocab-size 60 --make-vocab-size-divisible-by 16 --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 1 --lr-decay-iters 4 --eval-iters 0 --threads 1 --train-iters 3"
"$MTC" train $TINY --world-size 4 --pp 2 --vpp 2 --tp 2 --global-batch-size 4 --trace "$D/i.json" >"$D/i.log" 2>&1 || { echo "FAIL train interleaved"; cat "$D/i.log"; fail=1; }
"$MTC" train $TINY --world-size 4 --pp 4 --global-batch-size 6 --trace "$D/p.json" >"$D/p.log" 2>&1 || { echo "FAIL train 1f1b"; cat "$D/p.log"; fail=1; }
for c in "i 2 2 4" "p 4 1 6"; do
    set -- $c
    "$MTC" schedule --from-trace "$D/$1.json" --svg "$D/$1.svg" >"$D/$1.txt" 2>"$D/$1.err" || { echo "FAIL schedule --from-trace $1"; cat "$D/$1.err"; fail=1; }
    vflag=""
    [ "$3" -gt 1 ] && vflag="--vpp $3"
    "$MTC" schedule --pp "$2" $vflag --microbatches "$4" --json >"$D/$1.plan.json" || fail=1
    python3 - "$D/$1.txt" "$D/$1.svg" "$D/$1.plan.json" "$2" "$3" "$4" <<'PY' || fail=1
import json, re, sys, xml.etree.ElementTree as ET
txt, svg, plan, P, V, M = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7])
text = open(txt).read()
planned = {r["rank"]: r["ops"].split() for r in json.load(open(plan))["ranks"]}
bad = []
head = text.splitlines()[0]
want = f"pp={P}" + (f" vpp={V}" if V > 1 else "") + f" microbatches={M}, 4 ranks"
if want not in head: bad.append(f"header {head!r} lacks {want!r}")
rows = re.findall(r"^rank (\d+) \(.* pp (\d+) ep \d+\): forward-backward ([0-9.]+) ms, "
                  r"forward/backward ([0-9.]+) ms, bubble ([0-9.]+)%; (.*)\n  (.*)$", text, re.M)
if len(rows) != 4: bad.append(f"{len(rows)} rank sections, want 4")
bubbles = {}
for rank, stage, fb, busy, bub, verdict, ops in rows:
    if verdict != "the order Megatron's schedule prescribes": bad.append(f"rank {rank}: {verdict}")
    if ops.split() != planned[int(stage)]: bad.append(f"rank {rank} ran {ops} not {planned[int(stage)]}")
    if not (0 <= float(bub) < 100 and 0 < float(busy) <= float(fb)): bad.append(f"rank {rank}: bubble {bub} busy {busy} fb {fb}")
    bubbles[int(rank)] = bub
if "4 of 4 ranks ran Megatron's order" not in text: bad.append("summary line")
root = ET.parse(svg).getroot()
ns = "{http://www.w3.org/2000/svg}"
boxes = {}
for g in root.iter(ns + "g"):
    t = g.find(ns + "title")
    r = g.find(ns + "rect")
    m = re.match(r"rank (\d+) ([FB])(\d+)\.(\d+) ", t.text if t is not None else "")
    if m and r is not None:
        boxes.setdefault(int(m.group(1)), []).append((float(r.get("x")), float(r.get("width")), float(r.get("y"))))
for rank in range(4):
    b = sorted(boxes.get(rank, []))
    if len(b) != 2 * M * V: bad.append(f"svg rank {rank}: {len(b)} boxes, want {2 * M * V}")
    for (x0, w0, _), (x1, _, _) in zip(b, b[1:]):
        if x0 + w0 > x1 + 0.02: bad.append(f"svg rank {rank}: boxes overlap at x={x1}")
    ys = {y for _, _, y in b}
    bg = [e for e in root.iter(ns + "rect") if e.get("fill") == "#e4e4e4" and float(e.get("y")) in ys]
    if len(bg) != 1: bad.append(f"svg rank {rank}: {len(bg)} backgrounds"); continue
    lo, hi = float(bg[0].get("x")), float(bg[0].get("x")) + float(bg[0].get("width"))
    if b and (b[0][0] < lo - 0.02 or b[-1][0] + b[-1][1] > hi + 0.02): bad.append(f"svg rank {rank}: boxes outside the span")
svg_bub = [e.text for e in root.iter(ns + "text") if e.text and re.fullmatch(r"bubble [0-9.]+%", e.text)]
if sorted(svg_bub) != sorted(f"bubble {v}%" for v in bubbles.values()): bad.append(f"svg bubbles {svg_bub} vs {bubbles}")
for x in bad: print("FAIL", x)
print(("ok  " if not bad else "FAIL"), f"pp={P} vpp={V} M={M}: executed order, boxes and bubbles of 4 ranks")
sys.exit(1 if bad else 0)
PY
done
"$MTC" schedule --from-trace "$D/p.json" --iteration 2 >"$D/it2.txt" 2>&1 && head -1 "$D/it2.txt" | grep -q "of iteration 2 " &&
    echo "ok   --iteration 2" || { echo "FAIL --iteration 2"; cat "$D/it2.txt"; fail=1; }
expect2() { # NAME PATTERN ARGS...
    name=$1 pat=$2
    shift 2
    "$MTC" schedule "$@" >"$D/o.txt" 2>"$D/e.txt"
    st=$?
    if [ $st -eq 2 ] && [ ! -s "$D/o.txt" ] && grep -q "$pat" "$D/e.txt"; then echo "ok   $name: exit 2"; else
        echo "FAIL $name: exit $st"; cat "$D/o.txt" "$D/e.txt"; fail=1; fi
}
expect2 "iteration outside the trace" "iteration 9 is not in .* (traced: 1 to 3)" --from-trace "$D/p.json" --iteration 9
echo '{"traceEvents": []}' >"$D/other.json"
expect2 "not an mtc trace" "is not a trace written by mtc train --trace" --from-trace "$D/other.json"
expect2 "missing trace" "cannot read trace" --from-trace "$D/none.json"
expect2 "--microbatches with --from-trace" "drop one of them" --from-trace "$D/p.json" --microbatches 4
"$MTC" train $TINY --world-size 4 --pp 4 --global-batch-size 6 --trace "$D/b.json" --trace-buffer-mb 0.01 >"$D/b.log" 2>"$D/b.err" ||
    { echo "FAIL bounded trace run"; cat "$D/b.err"; fail=1; }
python3 - "$D/p.json" "$D/b.json" "$D/b.err" <<'PY' || fail=1
import json, re, sys
full, bounded = (json.load(open(p)) for p in sys.argv[1:3])
err = open(sys.argv[3]).read()
def per_rank(d):
    n = [0] * d["otherData"]["world_size"]
    for e in d["traceEvents"]: n[e["pid"]] += 1
    return n
drop = bounded["otherData"]["dropped_events_per_rank"]
kept, want = per_rank(bounded), per_rank(full)
bad = []
if sum(drop) != bounded["otherData"]["dropped_events"] or not all(d > 0 for d in drop): bad.append(f"dropped {drop}")
if [k + d for k, d in zip(kept, drop)] != want: bad.append(f"kept {kept} + dropped {drop} != {want}")
if f"lacks {sum(drop)} events that 4 rank(s) recorded past --trace-buffer-mb 0.01 MiB" not in err: bad.append(f"warning: {err!r}")
for x in bad: print("FAIL", x)
print(("ok  " if not bad else "FAIL"), f"--trace-buffer-mb 0.01: kept {kept} + dropped {drop} = the unbounded run's events")
sys.exit(1 if bad else 0)
PY
"$MTC" schedule --from-trace "$D/b.json" >"$D/bt.txt" 2>&1
grep -q "^note: the ranks dropped [0-9]* events at the trace's memory bound" "$D/bt.txt" && echo "ok   --from-trace notes the dropped events" ||
    { echo "FAIL no note of dropped events"; cat "$D/bt.txt"; fail=1; }
"$MTC" train $TINY --global-batch-size 2 --trace "$D/z.json" --trace-buffer-mb 0 >"$D/z.out" 2>"$D/z.err"
[ $? -eq 2 ] && grep -q "trace-buffer-mb=0 must be a size in MiB above 0" "$D/z.err" && echo "ok   --trace-buffer-mb 0: exit 2" ||
    { echo "FAIL --trace-buffer-mb 0"; cat "$D/z.err"; fail=1; }
exit $fail
