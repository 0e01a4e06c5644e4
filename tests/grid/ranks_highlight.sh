#!/bin/sh
# tests/grid/ranks_highlight.sh - `mtc ranks --svg --highlight`:
#  - a group kind (dp, pp, the embedding group): every member cell gets one
#    highlight outline whose colour and "gN" label are its group's, taken
#    from `mtc ranks --json` (members of a group share a colour, different
#    groups differ), non-members none; Megatron's group name does the same
#    as the short name (identical SVG);
#  - a rank list: those cells outlined, every other cell faded;
#  - a bad kind, a rank outside the world and --highlight without --svg
#    exit 2 with the fix on stderr.
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
L="--world-size 16 --tp 2 --pp 2"
"$MTC" ranks $L --json >"$D/g.json" || { echo "FAIL ranks --json"; exit 1; }
for k in "dp DATA_PARALLEL_GROUP" "pp PIPELINE_MODEL_PARALLEL_GROUP" "embd EMBEDDING_GROUP"; do
    set -- $k
    "$MTC" ranks $L --svg "$D/$1.svg" --highlight "$1" >/dev/null || { echo "FAIL --highlight $1"; fail=1; }
    "$MTC" ranks $L --svg "$D/$1.long.svg" --highlight "$2" >/dev/null || { echo "FAIL --highlight $2"; fail=1; }
    cmp -s "$D/$1.svg" "$D/$1.long.svg" && echo "ok   --highlight $2 draws what --highlight $1 does" ||
        { echo "FAIL --highlight $2 differs from $1"; fail=1; }
    python3 - "$D/$1.svg" "$D/g.json" "$2" <<'PY' || fail=1
import json, re, sys, xml.etree.ElementTree as ET
svg, groups, name = sys.argv[1:4]
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(svg).getroot()
lists = json.load(open(groups))["groups"][name]
want = {r: g for g, l in enumerate(lists) for r in l}
got, bad = {}, []
for g in root.iter(ns + "g"):
    t = g.find(ns + "title")
    m = re.match(r"rank (\d+):", t.text if t is not None and t.text else "")
    if not m: continue
    r = int(m.group(1))
    hl = [e for e in g.findall(ns + "rect") if e.get("class") == "highlight"]
    lab = [e.text for e in g.findall(ns + "text") if e.text and re.fullmatch(r"g\d+", e.text)]
    if r not in want:
        if hl or lab: bad.append(f"rank {r} is in no {name} but is outlined")
        continue
    if len(hl) != 1 or lab != [f"g{want[r]}"]: bad.append(f"rank {r}: {len(hl)} outlines, labels {lab}, want g{want[r]}"); continue
    got[r] = hl[0].get("stroke")
if len(got) != len(want): bad.append(f"{len(got)} outlined ranks, want {len(want)}")
colour = {}
for r, c in got.items(): colour.setdefault(want[r], set()).add(c)
if any(len(v) != 1 for v in colour.values()): bad.append("a group with two outline colours")
if len({next(iter(v)) for v in colour.values()}) != len(lists): bad.append("two groups share an outline colour")
for x in bad: print("FAIL", x)
print(("ok  " if not bad else "FAIL"), f"--highlight {name}: {len(got)} ranks outlined in {len(lists)} group colours")
sys.exit(1 if bad else 0)
PY
done
"$MTC" ranks $L --svg "$D/list.svg" --highlight 0,5,9 >/dev/null || { echo "FAIL --highlight 0,5,9"; fail=1; }
python3 - "$D/list.svg" <<'PY' || fail=1
import re, sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
lit, faded, bad = [], [], []
for g in root.iter(ns + "g"):
    t = g.find(ns + "title")
    m = re.match(r"rank (\d+):", t.text if t is not None and t.text else "")
    if not m: continue
    r = int(m.group(1))
    hl = [e for e in g.findall(ns + "rect") if e.get("class") == "highlight"]
    (lit if hl and g.get("opacity") is None else faded if not hl and g.get("opacity") == "0.3" else bad).append(r)
ok = sorted(lit) == [0, 5, 9] and len(faded) == 13 and not bad
print(("ok  " if ok else "FAIL"), f"--highlight 0,5,9: outlined {sorted(lit)}, {len(faded)} faded, odd {bad}")
sys.exit(0 if ok else 1)
PY
expect2() { # NAME PATTERN ARGS...
    name=$1 pat=$2
    shift 2
    "$MTC" ranks $L "$@" >"$D/o.txt" 2>"$D/e.txt"
    st=$?
    if [ $st -eq 2 ] && grep -q -- "$pat" "$D/e.txt" && [ ! -s "$D/o.txt" ]; then echo "ok   $name: exit 2"; else
        echo "FAIL $name: exit $st"; cat "$D/o.txt" "$D/e.txt"; fail=1; fi
}
expect2 "unknown kind" "neither a group kind of this layout nor a rank list (valid: tp pp dp" --svg "$D/x.svg" --highlight bogus
expect2 "rank outside" "ranks are 0 to 15" --svg "$D/x.svg" --highlight 3,16
expect2 "no --svg" "add --svg FILE" --highlight tp
exit $fail
