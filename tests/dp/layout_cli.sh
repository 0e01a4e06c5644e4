#!/bin/sh
# tests/dp/layout_cli.sh - `mtc layout` end to end: --json equals every case
# of tests/data/megatron/dist_opt_layout.json (every field the case has),
# --no-distributed-optimizer gives the case's plain DDP layout, and bad input
# exits 2 with nothing on stdout. Needs python3; env MTC = the mtc binary.
set -u
MTC=${MTC:?set MTC to the mtc binary}
EX=tests/data/megatron/dist_opt_layout.json
if [ ! -f "$EX" ]; then echo "FAIL: dist_opt_layout.json not found"; exit 1; fi
if ! command -v python3 >/dev/null; then echo "SKIP: python3 not found"; exit 0; fi

python3 - "$MTC" "$EX" <<'EOF'
import json, subprocess, sys
mtc, ex = sys.argv[1:3]
d = json.load(open(ex))
fails = 0
for i, c in enumerate(d["cases"]):
    a = [mtc, "layout", "--param-numels", ",".join(map(str, c["param_numels_forward_order"])),
         "--data-parallel-size", str(c["data_parallel_world_size"])]
    if c["bucket_size"] is not None: a += ["--ddp-bucket-size", str(c["bucket_size"])]
    if c["pad_buckets_for_high_nccl_busbw"]: a += ["--pad-buckets-for-high-nccl-busbw"]
    if c["shared_embedding_param_indices"]:
        a += ["--shared-embedding-params", ",".join(map(str, c["shared_embedding_param_indices"]))]
    p = subprocess.run(a + ["--json"], capture_output=True, text=True)
    if p.returncode != 0: print("FAIL case", i, p.stderr); fails += 1; continue
    got = json.loads(p.stdout)
    for k, v in c.items():
        if k == "note": continue
        if got.get(k) != v: print("FAIL case", i, "field", k, "\n got ", got.get(k), "\n want", v); fails += 1
    q = subprocess.run(a + ["--no-distributed-optimizer", "--json"], capture_output=True, text=True)
    g = json.loads(q.stdout) if q.returncode == 0 else {}
    for k in ("param_index_map", "bucket_indices"):
        if g.get(k) != c["ddp_no_distopt_layout"][k]: print("FAIL case", i, "no-distopt", k); fails += 1
    if "shards" in g: print("FAIL case", i, "no-distopt has shards"); fails += 1
    t = subprocess.run(a, capture_output=True, text=True)
    if t.returncode != 0 or "bucket 0" not in t.stdout or "dp rank 0" not in t.stdout:
        print("FAIL text", i, t.stdout, t.stderr); fails += 1
for bad in (["--param-numels", "10,x,3"], ["--param-numels", "10,0"], ["--data-parallel-size", "2"],
            ["--param-numels", "10", "--dp", "0"], ["--param-numels", "10,20", "--shared-embedding-params", "2"],
            ["--param-numels", "10", "--ddp-bucket-size", "0"], ["--param-numels", "10", "--frobnicate"]):
    p = subprocess.run([mtc, "layout"] + bad, capture_output=True, text=True)
    if p.returncode != 2 or p.stdout != "" or "error" not in p.stderr:
        print("FAIL bad input", bad, p.returncode, repr(p.stdout), p.stderr); fails += 1
print("layout CLI:", "ok" if fails == 0 else "%d failures" % fails)
sys.exit(1 if fails else 0)
EOF
