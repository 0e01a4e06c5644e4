#!/usr/bin/env python3
"""tests/grid/ranks_cli.py - `mtc ranks` against Megatron's examples.

For every configuration of tests/data/megatron/rank_groups.json:
`$MTC ranks ... --json` gives exactly its groups (names, order, lists) and
sizes. For every invalid one: exit status 2, nothing on stdout, one line on
stderr containing Megatron's message. Also: --svg writes well-formed XML
naming every rank, 1024 ranks answer quickly, flag errors exit 2."""
import json, os, subprocess, sys, tempfile, time
import xml.etree.ElementTree as ET

MTC = os.environ["MTC"]
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def examples_path():
    path = "tests/data/megatron/rank_groups.json"
    if not os.path.exists(path):
        sys.exit("FAIL: cannot find %s (run from the repository root)" % path)
    return path


def flags(args):
    out = ["--world-size", str(args["world_size"]),
           "--tensor-model-parallel-size", str(args["tensor_model_parallel_size"]),
           "--pipeline-model-parallel-size", str(args["pipeline_model_parallel_size"]),
           "--context-parallel-size", str(args["context_parallel_size"]),
           "--expert-model-parallel-size", str(args["expert_model_parallel_size"]),
           "--order", args["order"]]
    if args.get("expert_tensor_parallel_size") is not None:
        out += ["--etp", str(args["expert_tensor_parallel_size"])]
    if args.get("num_distributed_optimizer_instances"):
        out += ["--num-distributed-optimizer-instances", str(args["num_distributed_optimizer_instances"])]
    if args.get("hierarchical_context_parallel_sizes"):
        out += ["--hierarchical-context-parallel-sizes", ",".join(map(str, args["hierarchical_context_parallel_sizes"]))]
    return out


def run(argv):
    return subprocess.run([MTC, "ranks"] + argv, capture_output=True, text=True, timeout=60)


ex = json.load(open(examples_path()))
for cfg in ex["configs"]:
    p = run(flags(cfg["args"]) + ["--json"])
    check(p.returncode == 0, f"{cfg['id']}: exit {p.returncode}: {p.stderr}")
    if p.returncode:
        continue
    got = json.loads(p.stdout)
    check(got["world_size"] == cfg["args"]["world_size"], f"{cfg['id']} world_size")
    check(got["data_parallel_size"] == cfg["derived"]["data_parallel_size"], f"{cfg['id']} dp")
    check(got["expert_data_parallel_size"] == cfg["derived"]["expert_data_parallel_size"], f"{cfg['id']} edp")
    check(list(got["groups"].keys()) == list(cfg["groups"].keys()),
          f"{cfg['id']} group names/order: {list(got['groups'].keys())}")
    for k, v in cfg["groups"].items():
        check(got["groups"].get(k) == v, f"{cfg['id']} {k}: {got['groups'].get(k)} != {v}")
    # the table for people runs too and names every kind
    t = run(flags(cfg["args"]))
    check(t.returncode == 0 and all(k in t.stdout for k in cfg["groups"]), f"{cfg['id']} text table")

for inv in ex["invalid"]:
    p = run(flags(inv["args"]) + ["--json"])
    check(p.returncode == 2, f"invalid {inv['args']}: exit {p.returncode}")
    check(p.stdout == "", f"invalid {inv['args']}: stdout not empty: {p.stdout[:80]}")
    check(inv["message"] in p.stderr, f"invalid: '{inv['message']}' not in stderr: {p.stderr}")
    check(p.stderr.count("\n") == 1 and p.stderr.startswith("mtc ranks: error: "), f"not one line: {p.stderr}")

# flag-level errors: exit 2, nothing on stdout
for argv in (["--tp", "x"], ["--no-such-flag", "1"], ["--world-size", "8", "--vpp", "2"],
             ["--world-size", "8", "--order", "tp-zz-dp"], ["--gpus-per-node", "0"]):
    p = run(argv)
    check(p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1, f"{argv}: {p.returncode} {p.stderr}")
p = run(["--help"])
check(p.returncode == 0 and "--tensor-model-parallel-size" in p.stdout and "--tp" in p.stdout, "--help")
# short aliases and the default world size (smallest valid)
p = run(["--tp", "2", "--pp", "2", "--cp", "2", "--ep", "2", "--etp", "1", "--json"])
check(p.returncode == 0 and json.loads(p.stdout)["world_size"] == 8, f"aliases/default world: {p.stderr}")

# one rank's view: with tp 2 pp 4 on 16 ranks (Megatron's docstring layout) rank 5 is
# tp rank 1 of [4 5], pp rank 1 of [1 5 9 13], and not in the embedding group
p = run(["--world-size", "16", "--tp", "2", "--pp", "4", "--rank", "5"])
lines = {l.split()[0]: l for l in p.stdout.splitlines()[1:]}
check(p.returncode == 0 and "index 1 of [4 5]" in lines.get("TENSOR_MODEL_PARALLEL_GROUP", ""), "--rank tp")
check("index 1 of [1 5 9 13]" in lines.get("PIPELINE_MODEL_PARALLEL_GROUP", ""), "--rank pp")
check("not a member" in lines.get("EMBEDDING_GROUP", ""), "--rank embedding")
p = run(["--world-size", "16", "--rank", "16"])
check(p.returncode == 2 and p.stdout == "", "--rank out of range")

# Megatron's standalone MTP stage (pretrain_gpt.py get_embedding_ranks): its pipeline rank
# joins EMBEDDING_GROUP, the last stage's only with a tied head; tp 2 x pp 4 on 8 ranks
ML = ["--world-size", "8", "--tp", "2", "--pp", "4", "--mtp-num-layers", "2", "--json"]
for extra, want in (([], [[0, 4, 6], [1, 5, 7]]),
                    (["--untie-embeddings-and-output-weights"], [[0, 4], [1, 5]])):
    p = run(ML + ["--pipeline-model-parallel-layout", "Et|t|mm|L"] + extra)
    got = json.loads(p.stdout)["groups"]["EMBEDDING_GROUP"] if p.returncode == 0 else None
    check(got == want, f"standalone MTP embedding group {extra}: {got} != {want} {p.stderr}")
p = run(ML + ["--pipeline-model-parallel-layout", "Et|t|t|mmL"])  # MTP with the loss
check(p.returncode == 0 and json.loads(p.stdout)["groups"]["EMBEDDING_GROUP"] == [[0, 6], [1, 7]],
      f"MTP with the loss: {p.stdout[:80]} {p.stderr}")
p = run(ML[:-1] + ["--mtp-num-layers", "1", "--pipeline-model-parallel-layout", "Et|t|mm|L"])
check(p.returncode == 2 and p.stdout == "" and "Number of mtp layers in layout must match" in p.stderr,
      f"layout m count refused: {p.returncode} {p.stderr}")

# partial distributed optimizer: warned about for an order where Megatron's inter-instance
# group does not pair the dense shards (dense dp-cp [0 1 2 3] sliced [0 1] [2 3], expert
# L1 groups [0 1] [2 3]); not for the default order
p = run(["--world-size", "4", "--ep", "2", "--order", "tp-dp-cp-ep-pp", "--num-distributed-optimizer-instances", "2"])
check(p.returncode == 0 and "warning: " in p.stdout, "no dist-opt warning for tp-dp-cp-ep-pp")
p = run(["--world-size", "4", "--ep", "2", "--num-distributed-optimizer-instances", "2"])
check(p.returncode == 0 and "warning: " not in p.stdout, "dist-opt warning for the default order")

with tempfile.TemporaryDirectory() as d:
    svg = os.path.join(d, "grid.svg")
    t0 = time.time()
    p = run(["--world-size", "1024", "--tp", "8", "--pp", "4", "--cp", "2", "--ep", "8", "--etp", "2",
             "--num-distributed-optimizer-instances", "2", "--json", "--svg", svg])
    dt = time.time() - t0
    check(p.returncode == 0, f"1024 ranks: {p.stderr}")
    check(dt < 5.0, f"1024 ranks took {dt:.2f} s")
    got = json.loads(p.stdout)
    check(len(got["groups"]["TENSOR_MODEL_PARALLEL_GROUP"]) == 128, "1024 ranks: 128 TP groups")
    root = ET.parse(svg).getroot()
    check(root.tag.endswith("svg"), "svg root")
    texts = {"".join(e.itertext()) for e in root.iter() if e.tag.endswith("text")}
    check(all(f"r{r}" in texts for r in range(1024)), "svg names every rank")
    check(not [f for f in os.listdir(d) if f != "grid.svg"], "no temporary file left")
    # an SVG path that cannot be written is bad input: exit 2 before any work, one line
    p = run(["--world-size", "8", "--svg", os.path.join(d, "missing", "x.svg")])
    check(p.returncode == 2 and p.stdout == "" and "does not exist" in p.stderr,
          f"unwritable svg: {p.returncode}")
    print(f"1024 ranks with --json and --svg: {dt * 1000:.0f} ms")

print(f"{len(ex['configs'])} configs, {len(ex['invalid'])} invalid examples; {failures} failures")
sys.exit(1 if failures else 0)
