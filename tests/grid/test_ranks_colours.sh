#!/bin/sh
# tests/grid/test_ranks_colours.sh - `mtc ranks --svg`: with 32 tensor-
# parallel groups (world 64, tp 2) every group gets its own fill colour
# (hue, saturation and lightness together) at least 10 apart in RGB from
# every other (hue alone, at one lightness, left pairs 5 apart), and the SVG
# is well-formed.
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
"$MTC" ranks --world-size 64 --tp 2 --svg "$D/r.svg" >/dev/null || { echo "FAIL mtc ranks"; exit 1; }
python3 - "$D/r.svg" <<'PY'
import colorsys, itertools, re, sys, xml.etree.ElementTree as E
E.parse(sys.argv[1])
text = open(sys.argv[1]).read()
fills = {}
for m in re.finditer(r'TP group (\d+)[^<]*</title>\s*<rect[^>]*fill="(hsl\([^"]*\))"', text):
    fills.setdefault(m.group(1), set()).add(m.group(2))
groups = len(fills)
one_each = all(len(v) == 1 for v in fills.values())
distinct = len({next(iter(v)) for v in fills.values()})
def rgb(f):
    h, s, l = (float(v) for v in re.findall(r'[0-9.]+', f))
    return [255 * c for c in colorsys.hls_to_rgb(h / 360, l / 100, s / 100)]
cols = [rgb(next(iter(v))) for v in fills.values()]
gap = min(sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5 for a, b in itertools.combinations(cols, 2))
print(f"{groups} TP groups, {distinct} distinct fills, closest pair {gap:.1f} apart in RGB")
sys.exit(0 if groups == 32 and one_each and distinct == groups and gap >= 10 else 1)
PY
