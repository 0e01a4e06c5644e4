#!/usr/bin/env python3
"""tests/grid/svg_pictures.py - the pictures can be read: `mtc ranks --svg`
and `mtc schedule --svg` are rendered by a real SVG client (Debian's
rsvg-convert, librsvg2-bin) to PNGs of the declared size, and checked by
geometry (DejaVu Sans Mono advances 0.602 em; a text's box is its advance x
its size):
  - ranks: every text of the legend and the cells lies inside the picture;
    no two texts of a cell overlap, none crosses the highlight outline's
    band; every cell text has a contrast ratio >= 4.5 (WCAG) against what it
    is drawn on (the cell's fill, or the white label of the stage);
  - schedule: one fill per (kind, chunk), forwards and backwards of
    different chunks at least 30 degrees of hue apart.
"""
import colorsys
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

MTC = os.environ.get("MTC", "build/mtc")
NS = "{http://www.w3.org/2000/svg}"
fails = 0


def check(cond, msg):
    global fails
    if not cond:
        print("FAIL", msg)
        fails += 1


def rgb(c):
    m = re.fullmatch(r"hsl\((\d+(?:\.\d+)?),(\d+)%,(\d+)%\)", c)
    if m:
        r, g, b = colorsys.hls_to_rgb(float(m[1]) / 360, int(m[3]) / 100, int(m[2]) / 100)
        return r, g, b
    named = {"white": "#ffffff", "black": "#000000"}
    c = named.get(c, c)
    if len(c) == 4:
        c = "#" + "".join(ch * 2 for ch in c[1:])
    return tuple(int(c[i:i + 2], 16) / 255 for i in (1, 3, 5))


def luminance(c):
    f = lambda v: v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
    r, g, b = (f(v) for v in rgb(c))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a, b):
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def text_box(e, size_default):
    size = float(e.get("font-size", size_default))
    s = "".join(e.itertext())
    w = len(s) * 0.602 * size
    x, y = float(e.get("x")), float(e.get("y"))
    a = e.get("text-anchor", "start")
    x0 = x - w if a == "end" else x - w / 2 if a == "middle" else x
    return (x0, y - 0.78 * size, x0 + w, y + 0.22 * size), s


def overlap(a, b):
    return a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5


def render(svg, root):
    if not shutil.which("rsvg-convert"):
        check(False, "rsvg-convert (Debian librsvg2-bin, scripts/deps.sh) is not installed")
        return
    png = svg[:-4] + ".png"
    p = subprocess.run(["rsvg-convert", svg, "-o", png], capture_output=True, text=True)
    check(p.returncode == 0, "rsvg-convert %s: %s" % (svg, p.stderr))
    with open(png, "rb") as f:
        head = f.read(24)
    w, h = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    check((w, h) == (int(root.get("width")), int(root.get("height"))),
          "%s rendered %dx%d, declared %sx%s" % (svg, w, h, root.get("width"), root.get("height")))


def ranks(d, name, args):
    svg = os.path.join(d, name + ".svg")
    p = subprocess.run([MTC, "ranks", "--svg", svg] + args, capture_output=True, text=True)
    check(p.returncode == 0, "%s: %s" % (name, p.stderr))
    root = ET.parse(svg).getroot()
    W, H = float(root.get("width")), float(root.get("height"))
    render(svg, root)
    size = float(root.get("font-size", 11))
    n_text = n_cells = 0
    for e in root.iter(NS + "text"):
        box, s = text_box(e, size)
        n_text += 1
        check(box[0] >= 0 and box[2] <= W and box[1] >= 0 and box[3] <= H,
              "%s: '%s' leaves the %gx%g picture (%s)" % (name, s, W, H, [round(v) for v in box]))
    for g in root.iter(NS + "g"):
        t = g.find(NS + "title")
        if t is None or not (t.text or "").startswith("rank "):
            continue
        n_cells += 1
        rects = g.findall(NS + "rect")
        fill = rects[0].get("fill")
        pills = [r for r in rects if r.get("fill") == "#ffffff"]
        hl = [r for r in rects if r.get("class") == "highlight"]
        texts = [text_box(e, size) + (e,) for e in g.findall(NS + "text")]
        for i in range(len(texts)):
            for j in range(i + 1, len(texts)):
                check(not overlap(texts[i][0], texts[j][0]),
                      "%s %s: '%s' overlaps '%s'" % (name, t.text.split(":")[0], texts[i][1], texts[j][1]))
        for box, s, e in texts:
            back = fill
            for pr in pills:
                px, py = float(pr.get("x")), float(pr.get("y"))
                ph = float(pr.get("height"))
                if px <= box[0] + 1 and box[2] <= px + float(pr.get("width")) + 1 and \
                        py <= box[1] + 2 and box[3] <= py + ph + 2:
                    back = "#ffffff"
            c = contrast(e.get("fill", "#000000"), back)
            check(c >= 4.5, "%s %s: '%s' contrast %.2f on %s" % (name, t.text.split(":")[0], s, c, back))
            for r in hl:  # the outline's band: 2 px either side of its edges
                x, y, w, h = (float(r.get(k)) for k in ("x", "y", "width", "height"))
                inner = (x + 2, y + 2, x + w - 2, y + h - 2)
                inside = inner[0] <= box[0] and box[2] <= inner[2] and inner[1] <= box[1] and box[3] <= inner[3]
                check(inside, "%s %s: '%s' crosses the highlight outline" % (name, t.text.split(":")[0], s))
    check(n_cells > 0, name + ": no cells")
    return n_text, n_cells


def schedule(d):
    svg = os.path.join(d, "s.svg")
    p = subprocess.run([MTC, "schedule", "--pp", "4", "--vpp", "4", "--microbatches", "8", "--svg", svg],
                       capture_output=True, text=True)
    check(p.returncode == 0, "schedule: " + p.stderr)
    root = ET.parse(svg).getroot()
    render(svg, root)
    fills = {}
    for g in root.iter(NS + "g"):
        t = g.find(NS + "title")
        m = re.match(r"rank \d+ ([FB])\d+\.(\d+)", t.text if t is not None else "")
        if m:
            fills.setdefault((m[1], int(m[2])), set()).add(g.find(NS + "rect").get("fill"))
    check(len(fills) == 8 and all(len(v) == 1 for v in fills.values()),
          "schedule: one fill per kind and chunk: %s" % fills)
    hues = {k: colorsys.rgb_to_hls(*rgb(next(iter(v))))[0] * 360 for k, v in fills.items()}
    for a in hues:
        for b in hues:
            if a < b:
                dh = abs(hues[a] - hues[b])
                dh = min(dh, 360 - dh)
                check(dh >= 30, "schedule: %s and %s are %.0f degrees of hue apart" % (a, b, dh))
    for k, v in fills.items():
        c = contrast("#000000", next(iter(v)))
        check(c >= 4.5, "schedule: labels on %s have contrast %.2f" % (k, c))
    return len(fills)


with tempfile.TemporaryDirectory() as d:
    cases = [
        ("plain", ["--world-size", "16", "--tp", "2", "--pp", "4"]),
        ("long-highlight", ["--world-size", "16", "--tp", "2", "--pp", "4", "--highlight",
                            "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP"]),
        ("moe-cp", ["--world-size", "32", "--tp", "2", "--cp", "2", "--pp", "2", "--ep", "4", "--etp", "1",
                    "--highlight", "dp"]),
        ("pp12-ranks", ["--world-size", "24", "--pp", "12", "--highlight", "0,5,9,13,22"]),
    ]
    for name, args in cases:
        nt, nc = ranks(d, name, args)
        print("ok   ranks %s: %d cells, %d texts inside, no overlap, contrast >= 4.5" % (name, nc, nt)
              if not fails else "after ranks %s: %d failures" % (name, fails))
    n = schedule(d)
    if not fails:
        print("ok   schedule: %d fills, 30+ degrees of hue apart" % n)
sys.exit(1 if fails else 0)
