#!/bin/sh
# tests/train/generate_cli.sh - `mtc generate` behaves like Hugging Face's
# generate on a small GPT-2 BPE model trained on documents ending in
# <|endoftext|>:
#   1. it stops at the end-of-document token, and --ignore-eos goes on with
#      the same tokens up to there;
#   2. with --repetition-penalty, --top-k and --top-p each step's token is the
#      one Hugging Face's processors give: the test re-applies them
#      (RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
#      TopKLogitsWarper, TopPLogitsWarper, written here in Python from their
#      definitions) to the raw logits --output-logits wrote and inverts the
#      cumulative distribution at the step's uniform draw;
#   3. the same seed gives the same tokens (and logits) for 1, 2 and 3 threads;
#   4. --ckpt-step N loads iteration N (the same tokens as a folder holding
#      only that iteration), a missing N is refused;
#   5. --print-ids prints the prompt's ids and the new ones.
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
TOK="--tokenizer-type GPT2BPETokenizer --vocab-file $MTC_SOURCE_DIR/tests/data/gpt2_tiny/vocab.json --merge-file $MTC_SOURCE_DIR/tests/data/gpt2_tiny/merges.txt"
python3 -c 'import json
for i in range(200): print(json.dumps({"text": "the quick brown fox jumps over the lazy dog %d times." % (i % 4)}))' >"$D/docs.jsonl"
# shellcheck disable=SC2086
"$MTC" preprocess --input "$D/docs.jsonl" --output-prefix "$D/ds" $TOK --append-eod >"$D/p.log" 2>&1 || { bad "preprocess"; cat "$D/p.log"; }
# shellcheck disable=SC2086
"$MTC" train --data-path "$D/ds_text_document" --num-layers 2 --hidden-size 48 --num-attention-heads 4 \
    --seq-length 32 --micro-batch-size 4 --global-batch-size 8 --lr 1e-2 --lr-decay-iters 200 --train-iters 60 \
    --save-interval 30 --log-interval 30 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --threads 1 \
    --save "$D/ck" >"$D/t.log" 2>&1 || { bad "train"; cat "$D/t.log"; }
EOD=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["<|endoftext|>"])' "$MTC_SOURCE_DIR/tests/data/gpt2_tiny/vocab.json")

# 1. the end-of-document token
"$MTC" generate --load "$D/ck" --prompt "the quick" --temperature 0 --max-new-tokens 40 --print-ids >"$D/stop.ids" 2>"$D/stop.err" || { bad "generate"; cat "$D/stop.err"; }
"$MTC" generate --load "$D/ck" --prompt "the quick" --temperature 0 --max-new-tokens 40 --print-ids --ignore-eos >"$D/go.ids" 2>&1 || bad "generate --ignore-eos"
python3 - "$D/stop.ids" "$D/go.ids" "$EOD" <<'EOF' && ok "stops at <|endoftext|> ($(cat "$D/stop.err")); --ignore-eos goes on" || bad "end of document"
import sys
stop, go, eod = open(sys.argv[1]).read().split(), open(sys.argv[2]).read().split(), sys.argv[3]
assert stop[-1] == eod and eod not in stop[:-1], (stop, eod)
assert len(go) > len(stop) and go[:len(stop)] == stop, (stop, go)
EOF
"$MTC" generate --load "$D/ck" --prompt "the quick" --temperature 0 --max-new-tokens 40 >"$D/stop.txt" 2>/dev/null
grep -q "endoftext" "$D/stop.txt" && bad "the eod token printed as text" || ok "text output: $(cat "$D/stop.txt")"

# 2. Hugging Face's processors on the raw logits
check_hf() { # NAME then generate flags
    name=$1; shift
    "$MTC" generate --load "$D/ck" --prompt "the lazy" --max-new-tokens 24 --ignore-eos --print-ids \
        --output-logits "$D/l.jsonl" "$@" >"$D/hf.ids" 2>"$D/hf.err" || { bad "$name: generate"; cat "$D/hf.err"; return; }
    python3 - "$D/l.jsonl" "$D/hf.ids" "$@" <<'EOF' && ok "$name: every step as Hugging Face's processors" || bad "$name"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ids = [int(x) for x in open(sys.argv[2]).read().split()]
a = sys.argv[3:]
opt = {"--temperature": 1.0, "--top-k": 0, "--top-p": 1.0, "--repetition-penalty": 1.0}
for i in range(0, len(a), 2):
    opt[a[i]] = float(a[i + 1])
n_prompt = len(ids) - len(rows)
sizes = []  # tokens left to draw from, per step
assert n_prompt >= 1 and len(rows) == 24
for r in rows:
    ctx = ids[:n_prompt + r["step"]]
    s = list(r["logits"])
    V = len(s)
    # RepetitionPenaltyLogitsProcessor: score < 0 ? score * p : score / p, per token present
    p = opt["--repetition-penalty"]
    for t in set(ctx):
        s[t] = s[t] * p if s[t] < 0 else s[t] / p
    if opt["--temperature"] == 0:  # greedy: the processed argmax
        best = max(range(V), key=lambda i: (s[i], -i))
        assert r["token"] == best, (r["step"], r["token"], best)
        continue
    s = [x / opt["--temperature"] for x in s]  # TemperatureLogitsWarper
    k = int(opt["--top-k"])
    if 0 < k < V:  # TopKLogitsWarper: below the k-th largest -> -inf
        kth = sorted(s, reverse=True)[k - 1]
        s = [x if x >= kth else -math.inf for x in s]
    m = max(s)
    e = [math.exp(x - m) if x > -math.inf else 0.0 for x in s]
    tot = sum(e)
    prob = [x / tot for x in e]
    tp = opt["--top-p"]
    if tp < 1:  # TopPLogitsWarper: ascending cumsum <= 1 - top_p removed, keep >= 1
        order = sorted(range(V), key=lambda i: (prob[i], -i))
        cum, keep = 0.0, set()
        for j, i in enumerate(order):
            cum += prob[i]
            if cum > 1 - tp or j == V - 1:
                keep.add(i)
        prob = [x if i in keep else 0.0 for i, x in enumerate(prob)]
    assert prob[r["token"]] > 0, ("a removed token was drawn", r["step"], r["token"])
    tot = sum(prob)
    target, acc, want = r["u"] * tot, 0.0, None
    for i, x in enumerate(prob):
        if x == 0:
            continue
        if target < acc + x:
            want = i
            break
        acc += x
    # a draw within float rounding of a boundary may fall on either side
    lo = sum(prob[:r["token"]])
    near = abs(target - lo) < 1e-5 * tot or abs(target - lo - prob[r["token"]]) < 1e-5 * tot
    assert want == r["token"] or near, (r["step"], r["token"], want)
    sizes.append(len([x for x in prob if x > 0]))
    assert 0 < sizes[-1] <= (k if 0 < k < V else V)
# the draws chose among several tokens (a nucleus of one checks nothing)
assert not sizes or max(sizes) > 3, sizes
EOF
}
check_hf "greedy, repetition penalty 1.8" --temperature 0 --repetition-penalty 1.8
check_hf "repetition penalty 0.7 (rewards repeats)" --temperature 0 --repetition-penalty 0.7
check_hf "top-p 0.6" --temperature 3 --top-p 0.6 --seed 7
check_hf "top-k 20, top-p 0.9, penalty 1.3" --temperature 3 --top-k 20 --top-p 0.9 --repetition-penalty 1.3 --seed 3
# the penalty changes what greedy picks (else the check above shows nothing)
"$MTC" generate --load "$D/ck" --prompt "the lazy" --max-new-tokens 24 --ignore-eos --print-ids --temperature 0 >"$D/g1" 2>/dev/null
"$MTC" generate --load "$D/ck" --prompt "the lazy" --max-new-tokens 24 --ignore-eos --print-ids --temperature 0 --repetition-penalty 1.8 >"$D/g2" 2>/dev/null
cmp -s "$D/g1" "$D/g2" && bad "repetition penalty 1.8 changed nothing" || ok "repetition penalty changes greedy's tokens"

# 3. the same seed, any thread count
for th in 1 2 3; do
    "$MTC" generate --load "$D/ck" --prompt "the" --max-new-tokens 30 --ignore-eos --print-ids --temperature 1 --seed 11 \
        --threads $th --output-logits "$D/l$th.jsonl" >"$D/th$th.ids" 2>&1 || bad "threads $th"
done
cmp -s "$D/th1.ids" "$D/th2.ids" && cmp -s "$D/th1.ids" "$D/th3.ids" && cmp -s "$D/l1.jsonl" "$D/l3.jsonl" &&
    ok "seed 11: the same tokens and logits for 1, 2 and 3 threads" || { bad "thread count changes the output"; cat "$D"/th*.ids; }

# 4. --ckpt-step
mkdir -p "$D/only30" && cp -r "$D/ck/iter_0000030" "$D/only30/" && echo 30 >"$D/only30/latest_checkpointed_iteration.txt"
"$MTC" generate --load "$D/ck" --ckpt-step 30 --prompt "the" --max-new-tokens 20 --ignore-eos --print-ids --seed 5 >"$D/s30" 2>&1 || bad "ckpt-step 30"
"$MTC" generate --load "$D/only30" --prompt "the" --max-new-tokens 20 --ignore-eos --print-ids --seed 5 >"$D/o30" 2>&1 || bad "only30"
"$MTC" generate --load "$D/ck" --prompt "the" --max-new-tokens 20 --ignore-eos --print-ids --seed 5 >"$D/s60" 2>&1 || bad "latest"
"$MTC" generate --load "$D/ck" --ckpt-step 30 --prompt "the" --max-new-tokens 20 --ignore-eos --seed 5 --output-logits "$D/a.jsonl" >/dev/null 2>&1
"$MTC" generate --load "$D/ck" --prompt "the" --max-new-tokens 20 --ignore-eos --seed 5 --output-logits "$D/b.jsonl" >/dev/null 2>&1
cmp -s "$D/s30" "$D/o30" && ! cmp -s "$D/a.jsonl" "$D/b.jsonl" && ok "--ckpt-step 30 loads iteration 30" || bad "--ckpt-step"
"$MTC" generate --load "$D/ck" --ckpt-step 45 --prompt "the" >"$D/e.out" 2>&1
st=$?
[ $st -eq 2 ] && grep -q "45" "$D/e.out" && ok "--ckpt-step 45 refused: $(head -n 1 "$D/e.out")" || { bad "ckpt-step 45: exit $st"; cat "$D/e.out"; }
"$MTC" generate --load "$D/ck" --prompt "the" --seed -3 >"$D/e.out" 2>&1
st=$?
[ $st -eq 2 ] && grep -q "seed=-3 must be >= 0" "$D/e.out" && ok "--seed -3 refused: $(head -n 1 "$D/e.out")" || { bad "seed -3: exit $st"; cat "$D/e.out"; }

# 5. --print-ids: the prompt's ids first
# shellcheck disable=SC2086
printf 'the lazy' | "$MTC" tokenize $TOK >"$D/p.ids" 2>/dev/null
n=$(wc -w <"$D/p.ids")
[ "$(cut -d' ' -f1-"$n" "$D/g1")" = "$(cat "$D/p.ids")" ] && ok "--print-ids starts with the prompt's $n ids" || { bad "--print-ids"; cat "$D/p.ids" "$D/g1"; }
exit $fail
