# tests/ckpt/ckpt_lib.sh - shared by the checkpoint script tests: a tiny
# model (dropout on, so the random stream's position matters), ok/bad, and a
# comparison of --metrics files' lm_loss and grad_norm per iteration.
TINY="--mock-data --vocab-size 60 --make-vocab-size-divisible-by 16 --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 --global-batch-size 16 --lr 1e-2 --lr-decay-style linear --lr-decay-iters 8 --log-interval 1 --eval-iters 0 --threads 1 --hidden-dropout 0.1 --attention-dropout 0.1"
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
# metric_lines FILE: "iteration lm_loss grad_norm" per line, as printed
metric_lines() {
    sed -n 's/.*"iteration": \([0-9]*\).*"lm_loss": \([^,]*\), "grad_norm": \([^,]*\),.*/\1 \2 \3/p' "$1"
}
# same_metrics NAME REF.jsonl GOT.jsonl TOL: every iteration of GOT is in REF
# with the same printed values (TOL 0) or within relative TOL
same_metrics() {
    metric_lines "$2" >"$2.m"
    metric_lines "$3" >"$3.m"
    n=$(wc -l <"$3.m")
    if [ "$n" -lt 1 ]; then bad "$1: no metrics"; return; fi
    if awk -v tol="$4" 'NR == FNR { l[$1] = $2; g[$1] = $3; next }
        !($1 in l) { bad = 1; next }
        { if (tol == 0) { if ($2 != l[$1] || $3 != g[$1]) bad = 1 }
          else for (k = 0; k < 2; k++) { a = k ? $3 : $2; b = k ? g[$1] : l[$1]; d = a - b; if (d < 0) d = -d; if (d > tol * (b < 0 ? -b : b)) bad = 1 } }
        END { exit bad }' "$2.m" "$3.m"; then
        if [ "$4" = 0 ]; then ok "$1: $n iterations identical"; else ok "$1: $n iterations within $4"; fi
    else bad "$1"; cat "$2.m" "$3.m"; fi
}
# npm_need CACHE DIR PKG@VER...: install the packages (optional platform
# binaries included: transformers.js loads sharp's) into CACHE/DIR unless
# the first is there; exit 77 (skipped) only when npm cannot reach its
# registry, fail when the install itself fails.
npm_need() {
    nd=$1/$2; shift 2
    first=$(echo "$1" | sed 's/@[^@]*$//')
    [ -f "$nd/node_modules/$first/package.json" ] && return 0
    if ! command -v npm >/dev/null 2>&1 || ! timeout 60 npm ping >/dev/null 2>&1; then
        echo "SKIP: npm cannot reach its registry (or is not installed): $*"
        exit 77
    fi
    mkdir -p "$nd"
    [ -f "$nd/package.json" ] || echo '{"name": "mtc-test-cache", "private": true}' >"$nd/package.json"
    (cd "$nd" && timeout 600 npm install --ignore-scripts --no-audit --no-fund "$@") >"$nd/npm.log" 2>&1 ||
        { echo "FAIL: npm install $* (registry reachable):"; tail -n 5 "$nd/npm.log"; exit 1; }
}
