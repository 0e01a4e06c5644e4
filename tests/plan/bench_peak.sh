#!/bin/sh
# tests/plan/bench_peak.sh - `mtc bench-peak --output FILE` writes a machine
# description `mtc plan` reads back: the GEMM rate at mtc's shapes
# (shape_tflops_fp32 > 0) and the share of a core under load (0 < cpu_share
# <= 1) are present, every kernel's cost (kernels_ns) and the resident set
# of a process without a model are positive, and `--explain` prints the
# rate a rank gets from them and the tiled attention's term.
# No timing is asserted (the machine is shared); the ranges are what the
# measurement defines. Bad --iters exits 2 with one line.
set -u
MTC=${MTC:-build/mtc}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

if "$MTC" bench-peak --iters 1 --output "$D/m.json" >"$D/log" 2>&1; then ok "bench-peak ran"; else bad "bench-peak: $(tail -2 "$D/log")"; fi
shape=$(sed -n 's/.*"shape_tflops_fp32": \([0-9.e+-]*\),.*/\1/p' "$D/m.json")
share=$(sed -n 's/.*"cpu_share": \([0-9.e+-]*\),.*/\1/p' "$D/m.json")
if awk -v s="${shape:-0}" 'BEGIN { exit !(s > 0) }'; then ok "shape_tflops_fp32 $shape > 0"; else bad "shape_tflops_fp32 '$shape'"; fi
if awk -v s="${share:-0}" 'BEGIN { exit !(s > 0 && s <= 1) }'; then ok "cpu_share $share in (0, 1]"; else bad "cpu_share '$share'"; fi
# the per-core FMA peak: MFU's denominator in plan and train (core/peak.h mtc_mfu)
fma=$(sed -n 's/.*"fma_tflops_fp32": \([0-9.e+-]*\)[,}]*.*/\1/p' "$D/m.json")
if awk -v s="${fma:-0}" 'BEGIN { exit !(s > 0) }'; then ok "fma_tflops_fp32 $fma > 0"; else bad "fma_tflops_fp32 '$fma'"; fi
# the kernels' costs: every one measured (> 0 but the two that are differences
# of timings and so may be put at 0 under noise: the GEMM's per-call cost of
# the fit, and attention dropout's extra over attention without it), and the
# resident set of a process
for key in norm_fwd norm_bwd gelu_fwd gelu_bwd dropout resid xent adam gradnorm moe_row_fwd moe_row_bwd gemm_gflops base_rss_mb; do
    v=$(sed -n "s/.*\"$key\": \([0-9.e+-]*\)[,}].*/\1/p" "$D/m.json")
    if awk -v s="${v:-0}" 'BEGIN { exit !(s > 0) }'; then :; else bad "kernels_ns $key '$v'"; fi
done
for key in gemm_call attn_drop; do
    v=$(sed -n "s/.*\"$key\": \([0-9.e+-]*\)[,}].*/\1/p" "$D/m.json")
    if awk -v s="${v:--1}" 'BEGIN { exit !(s >= 0) }'; then :; else bad "kernels_ns $key '$v'"; fi
done
ok "kernels_ns measured"
M="--vocab-size 256 --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 --global-batch-size 8"
if "$MTC" plan $M --world-size 2 --machine "$D/m.json" --explain tp1-pp1 >"$D/e" 2>&1 &&
    grep -q "per core at mtc.s shapes x 1 cores x .* share of a core under load" "$D/e" &&
    grep -q "attention .* tiled: 64x64 causal tiles" "$D/e"; then
    ok "explain shows the rate"
else
    bad "explain: $(grep GEMMs "$D/e")"
fi
# with MPI built, what an MPI process adds (bench-peak runs itself under mpiexec)
v=$(sed -n 's/.*"mpi_rss_mb": \([0-9.e+-]*\)[,}].*/\1/p' "$D/m.json")
if [ "${MTC_HAVE_MPI:-OFF}" = ON ]; then
    if awk -v s="${v:-0}" 'BEGIN { exit !(s > 0) }'; then ok "mpi_rss_mb $v > 0"; else bad "mpi_rss_mb '$v' with MPI: $(grep -i mpi "$D/log")"; fi
elif [ "${v:-0}" = 0 ]; then ok "mpi_rss_mb 0 without MPI"; else bad "mpi_rss_mb '$v' without MPI"; fi
# the oversubscription probes: rank-threads always (their fit is >= 0, a
# part may be 0), MPI processes with MPI built (0 without: priced as threads)
for key in oversub_sync_us oversub_frac mpi_oversub_sync_us mpi_oversub_frac; do
    v=$(sed -n "s/.*\"$key\": \([0-9.e+-]*\)[,}]*\$/\1/p" "$D/m.json")
    if awk -v s="${v:--1}" 'BEGIN { exit !(s >= 0) }'; then :; else bad "$key '$v'"; fi
done
a=$(sed -n 's/.*"mpi_oversub_sync_us": \([0-9.e+-]*\),*$/\1/p' "$D/m.json")
b=$(sed -n 's/.*"mpi_oversub_frac": \([0-9.e+-]*\),*$/\1/p' "$D/m.json")
if [ "${MTC_HAVE_MPI:-OFF}" = ON ]; then
    if grep -q "MPI processes on .* cores between GEMMs" "$D/log" && ! grep -q "probe did not run: priced" "$D/log"; then
        ok "MPI oversubscription probe ran ($a us, $b)"
    else bad "mpi_oversub '$a' '$b' with MPI: $(grep -i mpi "$D/log")"; fi
elif [ "${a:-0}" = 0 ] && [ "${b:-0}" = 0 ]; then ok "mpi_oversub 0 without MPI"; else bad "mpi_oversub '$a' '$b' without MPI"; fi
if "$MTC" plan $M --world-size 4 --machine "$D/m.json" --explain tp1-pp1 >"$D/e4" 2>&1 &&
    grep -q "(4 ranks on .* cores: .* oversubscribed probe)" "$D/e4"; then
    ok "explain shows the oversubscription terms"
else
    bad "explain oversubscribed: $(sed -n 2,4p "$D/e4")"
fi
# the resident estimate: the allocation + the process's base over its ranks
if "$MTC" plan $M --world-size 2 --machine "$D/m.json" --explain tp1-pp1 --ranks-per-process 1 >"$D/e1" 2>&1 &&
    grep -q "resident per rank (estimate): .* + an MPI process's .* / 1 ranks per process" "$D/e1"; then
    ok "explain shows the resident estimate"
else
    bad "resident: $(tail -2 "$D/e1")"
fi
for arg in "--ranks-per-process 3" "--hidden-dropout 1" "--attention-dropout -0.5"; do
    "$MTC" plan $M --world-size 2 --machine "$D/m.json" $arg >"$D/o" 2>"$D/err"
    st=$?
    named=$(echo "$arg" | sed 's/^--\([a-z-]*\) \(.*\)/\1=\2/') # the value as the error names it
    if [ "$st" = 2 ] && [ "$(wc -l <"$D/err")" -le 2 ] && grep -q -- "$named" "$D/err"; then
        ok "plan $arg refused"
    else
        bad "plan $arg: status $st: $(cat "$D/err")"
    fi
done
"$MTC" bench-peak --iters 0 --output "$D/x.json" >"$D/o" 2>"$D/err"
st=$?
if [ "$st" = 2 ] && [ "$(wc -l <"$D/err")" -le 2 ] && grep -q "iters=0" "$D/err"; then ok "--iters 0 refused"; else bad "--iters 0: status $st: $(cat "$D/err")"; fi
exit $fail
