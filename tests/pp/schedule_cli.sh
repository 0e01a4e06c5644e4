#!/bin/sh
# tests/pp/schedule_cli.sh - `mtc schedule` end to end: --json equals every
# config of tests/data/megatron/schedules.json (every field the example has),
# every invalid example exits 2 with Megatron's message on stderr and nothing
# on stdout, and --svg writes a well-formed SVG with one row per rank.
# Needs python3 (for JSON and XML parsing); env MTC = the mtc binary.
set -u
MTC=${MTC:?set MTC to the mtc binary}
EX=tests/data/megatron/schedules.json
if [ ! -f "$EX" ]; then echo "FAIL: schedules.json not found"; exit 1; fi
if ! command -v python3 >/dev/null; then echo "SKIP: python3 not found"; exit 0; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

python3 - "$MTC" "$EX" "$TMP" <<'EOF'
import json, subprocess, sys, xml.etree.ElementTree as ET
mtc, ex, tmp = sys.argv[1:4]
d = json.load(open(ex))
fails = 0
def args_of(c):
    a = [mtc, "schedule", "--pp", str(c["pp"]), "--microbatches", str(c["num_microbatches"])]
    if c.get("vpp") is not None: a += ["--vpp", str(c["vpp"])]
    if c.get("microbatch_group_size_per_vp_stage") is not None:
        a += ["--microbatch-group-size", str(c["microbatch_group_size_per_vp_stage"])]
    return a
for c in d["configs"]:
    p = subprocess.run(args_of(c) + ["--json"], capture_output=True, text=True)
    if p.returncode != 0:
        print("FAIL exit", p.returncode, c["pp"], c.get("vpp"), p.stderr); fails += 1; continue
    got = json.loads(p.stdout)
    # the issue's short key and Megatron's long one carry the same value
    if got.get("microbatch_group_size") != got.get("microbatch_group_size_per_vp_stage", "missing"):
        print("FAIL microbatch_group_size", got.get("microbatch_group_size")); fails += 1
    for k, v in c.items():
        if k in ("variant_compute_order_identical", "checked"): continue
        if got.get(k) != v:
            print("FAIL field", k, "pp", c["pp"], "vpp", c.get("vpp"), "\n got ", got.get(k), "\n want", v); fails += 1
    # the text form carries the same ops
    t = subprocess.run(args_of(c), capture_output=True, text=True)
    for r in c["ranks"]:
        if r["ops"].split()[0] not in t.stdout: print("FAIL text output"); fails += 1
    # SVG: well-formed, one row label per rank, one box per op
    svg = tmp + "/s.svg"
    s = subprocess.run(args_of(c) + ["--svg", svg], capture_output=True, text=True)
    if s.returncode != 0: print("FAIL svg exit", s.stderr); fails += 1; continue
    root = ET.parse(svg).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    if root.tag != ns + "svg": print("FAIL svg root", root.tag); fails += 1
    titles = [t.text for t in root.iter(ns + "title")]
    nops = sum(len(r["ops"].split()) for r in c["ranks"])
    if len(titles) != nops: print("FAIL svg boxes", len(titles), nops); fails += 1
    texts = [t.text or "" for t in root.iter(ns + "text")]
    for r in c["ranks"]:
        if "rank %d" % r["rank"] not in texts: print("FAIL svg row", r["rank"]); fails += 1
    if not any("bubble fraction" in t for t in texts): print("FAIL svg bubble line"); fails += 1
    # the colour legend, and the phase marks whenever backwards run
    if not any(t == "forward" or t.startswith("forward chunk") for t in texts): print("FAIL svg legend"); fails += 1
    has_b = any(o.startswith("B") for r in c["ranks"] for o in r["ops"].split())
    if has_b and "warm-up" not in texts: print("FAIL svg phase legend"); fails += 1
for c in d["invalid"]:
    p = subprocess.run(args_of(c) + ["--json"], capture_output=True, text=True)
    if p.returncode != 2 or p.stdout != "" or c["message"] not in p.stderr:
        print("FAIL invalid", c, "\n rc", p.returncode, "stdout", repr(p.stdout), "stderr", p.stderr); fails += 1
# usage errors: exit 2, nothing on stdout
for extra in (["--pp", "1", "--vpp", "2", "--microbatches", "4"], ["--pp", "2"],
              ["--pp", "2", "--microbatches", "4", "--bogus"],
              ["--pp", "2", "--num-layers", "8", "--num-layers-per-virtual-pipeline-stage", "3", "--microbatches", "4"]):
    p = subprocess.run([mtc, "schedule"] + extra, capture_output=True, text=True)
    if p.returncode != 2 or p.stdout != "" or "error" not in p.stderr:
        print("FAIL usage", extra, p.returncode, repr(p.stdout), p.stderr); fails += 1
# the training rule derives vpp: 8 layers / pp 2 / 2 per virtual stage -> vpp 2
p = subprocess.run([mtc, "schedule", "--pp", "2", "--num-layers", "8",
                    "--num-layers-per-virtual-pipeline-stage", "2", "--microbatches", "4", "--json"],
                   capture_output=True, text=True)
if p.returncode != 0 or json.loads(p.stdout)["vpp"] != 2: print("FAIL derived vpp", p.stdout, p.stderr); fails += 1
# a layout string derives vpp (stages / pp) and the layer count; the text
# output lists each rank's layers per chunk, equal rows merged (pp/layout.c)
p = subprocess.run([mtc, "schedule", "--pp", "4", "--microbatches", "8", "--json",
                    "--pipeline-model-parallel-layout", "Et*3|(tt|)*5,t|L"], capture_output=True, text=True)
if p.returncode != 0 or json.loads(p.stdout)["vpp"] != 2: print("FAIL layout vpp", p.stdout, p.stderr); fails += 1
p = subprocess.run([mtc, "schedule", "--pp", "4", "--microbatches", "8",
                    "--pipeline-model-parallel-layout", "Et*3|(tt|)*5,t|L"], capture_output=True, text=True)
rows = [l.split() for l in p.stdout.splitlines() if l.startswith("PP rank")]
want = [["PP", "rank", "0", "embedding,decoder*3", "decoder*2"], ["PP", "rank", "1", "decoder*2", "decoder*2"],
        ["PP", "rank", "2", "decoder*2", "decoder"], ["PP", "rank", "3", "decoder*2", "loss"]]
if p.returncode != 0 or "layers of 14 (pipeline split: layout Et*3|(tt|)*5,t|L)" not in p.stdout or rows != want:
    print("FAIL layout table", p.stdout, p.stderr); fails += 1
p = subprocess.run([mtc, "schedule", "--pp", "4", "--microbatches", "4", "--num-layers", "10",
                    "--decoder-first-pipeline-num-layers", "1"], capture_output=True, text=True)
rows = [l.split() for l in p.stdout.splitlines() if l.startswith("PP rank")]
if p.returncode != 0 or rows != [["PP", "rank", "0", "embedding,decoder"], ["PP", "rank", "1-2", "decoder*3"],
                                 ["PP", "rank", "3", "decoder*3,loss"]]:
    print("FAIL uneven table", p.stdout, p.stderr); fails += 1
# MTP: the layout's 'm' layers are drawn where the layout puts them
p = subprocess.run([mtc, "schedule", "--pp", "2", "--microbatches", "4", "--mtp-num-layers", "2",
                    "--pipeline-model-parallel-layout", "Et|t|tt|mmL"], capture_output=True, text=True)
rows = [l.split() for l in p.stdout.splitlines() if l.startswith("PP rank")]
if p.returncode != 0 or rows != [["PP", "rank", "0", "embedding,decoder", "decoder*2"],
                                 ["PP", "rank", "1", "decoder", "mtp*2,loss"]]:
    print("FAIL mtp layout table", rows, p.stderr); fails += 1
# Megatron's standalone MTP stage: pp rank 0's second virtual stage, its messages 1 + D states
p = subprocess.run([mtc, "schedule", "--pp", "2", "--microbatches", "4", "--mtp-num-layers", "2",
                    "--pipeline-model-parallel-layout", "Et|t|mm|L"], capture_output=True, text=True)
rows = [l.split() for l in p.stdout.splitlines() if l.startswith("PP rank")]
if p.returncode != 0 or rows != [["PP", "rank", "0", "embedding,decoder", "mtp*2"],
                                 ["PP", "rank", "1", "decoder", "loss"]] or \
        "virtual stage 2 (pp rank 0, Megatron's standalone MTP stage) on to the loss's stage 3 carry " \
        "[h_0 | h_1 .. h_2], 3 hidden states" not in p.stdout:
    print("FAIL standalone mtp table", p.stdout, p.stderr); fails += 1
p = subprocess.run([mtc, "schedule", "--pp", "2", "--microbatches", "4", "--num-layers", "4",
                    "--mtp-num-layers", "1"], capture_output=True, text=True)
rows = [l.split() for l in p.stdout.splitlines() if l.startswith("PP rank")]
if p.returncode != 0 or rows != [["PP", "rank", "0", "embedding,decoder*2"], ["PP", "rank", "1", "decoder*2,mtp,loss"]]:
    print("FAIL mtp default placement", rows, p.stderr); fails += 1
for extra, msg in ((["--num-layers", "10"], "Number of layers should be divisible"),
                   (["--pipeline-model-parallel-layout", "Et|tL|t"], "must be divisible by pipeline_model_parallel_size"),
                   (["--pipeline-model-parallel-layout", "Et|t|t|tmL"], "Number of mtp layers in layout must match mtp_num_layers")):
    p = subprocess.run([mtc, "schedule", "--pp", "4", "--microbatches", "4"] + extra, capture_output=True, text=True)
    if p.returncode != 2 or p.stdout != "" or msg not in p.stderr:
        print("FAIL split refusal", extra, p.returncode, p.stderr); fails += 1
print("schedule CLI:", "ok" if fails == 0 else "%d failures" % fails)
sys.exit(1 if fails else 0)
EOF
