# tests/parity/mtp_lib.sh - shared by mtp_cli.sh and mtp_mpi.sh: the MTP
# model's flags and a comparison of two --metrics files' lm_loss,
# grad_norm and every mtp_k_loss per iteration (relative 2e-5).
MTP="--position-embedding-type rope --mtp-num-layers 2 --mtp-loss-scaling-factor 0.3"
# same_mtp NAME SERIAL.jsonl LAYOUT.jsonl [ITERATIONS]
same_mtp() {
    if [ ! -s "$2" ] || [ ! -s "$3" ]; then bad "$1: missing metrics"; return; fi
    if paste -d' ' "$2" "$3" | awk -v want="${4:-4}" '
        { n = 0; for (i = 1; i <= NF; i++) if ($i == "\"lm_loss\":" || $i == "\"grad_norm\":" || $i ~ /^"mtp_[0-9]+_loss":$/) { v[n++] = $(i + 1) + 0 } }
        { h = n / 2; if (h < 4) bad = 1; for (k = 0; k < h; k++) { a = v[k]; b = v[k + h]; d = a - b; if (d < 0) d = -d; if (d > 2e-5 * (b < 0 ? -b : b)) bad = 1 } ; lines++ }
        END { exit (bad || lines != want) }'; then ok "$1: ${4:-4} iterations, loss, grad norm and both MTP losses within 2e-5"
    else bad "$1"; paste -d'\n' "$2" "$3" | cut -c1-240; fi
}
