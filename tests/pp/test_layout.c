/* tests/pp/test_layout.c - the pipeline split (pp/layout.c) against
 * Megatron-LM core_v0.18.0's own arithmetic, transcribed below from
 * transformer_block.py get_num_layers_to_build and transformer_layer.py
 * get_transformer_layer_offset (the uneven first/last and the
 * account-for-embedding/loss branches), for every valid configuration of a
 * sweep; the even split equal to the old st * L / S ranges (so runs stay
 * bit-identical); layout strings expanded as parse_str_to_list does; every
 * layer built exactly once; and each refusal with its message. */
#include <stdlib.h>
#include <string.h>

#include "core/result.h"
#include "pp/layout.h"
#include "pp/schedule.h"
#include "test.h"

/* ---- Megatron's formulas (None = 0 here; vp = vpp > 1) ---- */
static int meg_num_layers(int L, int pp, int vpp, int f, int l, int e, int lo, int r, int v) {
    int n;
    if (f || l) {
        int dist = L, left = pp;
        if (f) dist -= f, left--;
        if (l) dist -= l, left--;
        n = left > 0 ? dist / left : 0;
        if (r == 0 && f) n = f;
        if (r == pp - 1 && l) n = l;
    } else {
        n = (L + e + lo) / pp;
    }
    if (vpp > 1 && pp > 1) n /= vpp;
    int first_vp = vpp > 1 ? v == 0 : 1, last_vp = vpp > 1 ? v == vpp - 1 : 1;
    if (e && first_vp && r == 0) n -= 1;
    if (lo && last_vp && r == pp - 1) n -= 1;
    return n;
}

static int meg_offset(int L, int pp, int vpp, int f, int l, int e, int lo, int r, int v) {
    if (pp <= 1) return 0;
    if (f || l) {
        int mid_st = pp - (f ? 1 : 0) - (l ? 1 : 0), mid = L - f - l, mid_r = f ? r - 1 : r;
        if (vpp > 1) {
            int cf = f / vpp, cl = l / vpp, cm = mid / vpp, tot = cf + cm + cl;
            /* Megatron divides by mid_st even when it is 0 (pp 2 with both
             * flags: a ZeroDivisionError there); the term is 0 then */
            return r == 0 ? v * tot : v * tot + cf + (mid_st ? mid_r * (cm / mid_st) : 0);
        }
        int per = mid_st > 0 ? mid / mid_st : 0;
        return r == 0 ? 0 : mid_r * per + f;
    }
    int n = L + e + lo, per = n / pp, off;
    if (vpp > 1)
        off = v * (n / vpp) + r * (per / vpp);
    else
        off = r * per;
    int first_vp = vpp > 1 ? v == 0 : 1;
    if (e && !(first_vp && r == 0)) off -= 1;
    return off;
}

static void test_even_is_the_old_split(void) {
    for (int pp = 1; pp <= 8; pp++)
        for (int vpp = 1; vpp <= 4; vpp++)
            for (int L = pp * vpp; L <= 4 * pp * vpp; L += pp * vpp) {
                int S = pp * vpp, bad = 0;
                pp_layout_stage st[32];
                T_CHECK(pp_layout_build(st, NULL, L, pp, vpp) == MTC_OK);
                pp_layout_args zero = {0};
                for (int s = 0; s < S; s++) {
                    pp_layout_stage one;
                    bad |= pp_layout_stage_get(&one, &zero, L, pp, vpp, s) != MTC_OK;
                    bad |= one.first_layer != s * L / S ||
                           one.first_layer + one.num_layers != (s + 1) * L / S;
                    bad |= one.has_embedding != (s == 0) || one.has_loss != (s == S - 1);
                    bad |= memcmp(&one, &st[s], sizeof one) != 0;
                }
                T_CHECKF(!bad, "even split L=%d pp=%d vpp=%d", L, pp, vpp);
            }
}

/* every valid (f, l) and (e, lo) configuration matches Megatron's formulas
 * and builds each layer once; the invalid ones are refused */
static void test_against_megatron(void) {
    int nvalid = 0, nrefused = 0;
    for (int pp = 2; pp <= 6; pp++)
        for (int vpp = 1; vpp <= 3; vpp++)
            for (int L = 1; L <= 16; L++)
                for (int mode = 0; mode < 2; mode++)
                    for (int a = 0; a <= (mode ? 1 : 8); a++)
                        for (int b = 0; b <= (mode ? 1 : 8); b++) {
                            if (vpp > 1 && pp < 2) continue;
                            pp_layout_args ar = {0};
                            if (mode)
                                ar.account_for_embedding = a, ar.account_for_loss = b;
                            else
                                ar.first_num_layers = a, ar.last_num_layers = b;
                            int S = pp * vpp;
                            pp_layout_stage st[18];
                            if (pp_layout_build(st, &ar, L, pp, vpp) != MTC_OK) {
                                nrefused++;
                                continue;
                            }
                            nvalid++;
                            int bad = 0, *seen = calloc((size_t)L, sizeof(int));
                            for (int s = 0; s < S; s++) {
                                int r = s % pp, v = s / pp;
                                int f = mode ? 0 : a, l = mode ? 0 : b, e = mode ? a : 0,
                                    lo = mode ? b : 0;
                                bad |= st[s].num_layers !=
                                       meg_num_layers(L, pp, vpp, f, l, e, lo, r, v);
                                bad |=
                                    st[s].first_layer != meg_offset(L, pp, vpp, f, l, e, lo, r, v);
                                for (int k = 0; k < st[s].num_layers; k++)
                                    if (st[s].first_layer + k < L) seen[st[s].first_layer + k]++;
                            }
                            for (int k = 0; k < L; k++)
                                bad |= seen[k] != 1;
                            free(seen);
                            T_CHECKF(!bad, "L=%d pp=%d vpp=%d %s %d %d", L, pp, vpp,
                                     mode ? "account" : "first/last", a, b);
                        }
    T_CHECK(nvalid > 300 && nrefused > 300); /* the sweep covers both sides */
}

static int refused(const pp_layout_args *a, int L, int pp, int vpp, const char *want) {
    mtc_result_t rc = pp_layout_validate(a, L, pp, vpp);
    int ok = rc == MTC_ERR_INVALID_ARGUMENT && strstr(mtc_error_detail(), want);
    if (!ok) fprintf(stderr, "  wanted '%s', got: %s\n", want, rc ? mtc_error_detail() : "OK");
    return ok;
}

static void test_refusals(void) {
    pp_layout_args none = {0};
    /* the two Megatron issues: 30 layers on pp 4, 80 on pp 16 x vpp 2 */
    T_CHECK(refused(&none, 30, 4, 1,
                    "Number of layers should be divisible by the "
                    "pipeline-model-parallel size (num-layers=30"));
    T_CHECK(refused(&none, 80, 16, 2,
                    "number of layers on each pipeline rank: 5 must be "
                    "divisible by virtual pipeline parallel degree 2"));
    char hint[256];
    pp_layout_suggest(hint, sizeof hint, 30, 4, 1);
    T_CHECKF(strstr(hint, "--decoder-first-pipeline-num-layers") != NULL, "%s", hint);
    /* the suggestion is valid */
    int f = 0, l = 0;
    const char *p = strstr(hint, "first-pipeline-num-layers ");
    if (p) f = atoi(p + strlen("first-pipeline-num-layers "));
    p = strstr(hint, "last-pipeline-num-layers ");
    if (p) l = atoi(p + strlen("last-pipeline-num-layers "));
    pp_layout_args sug = {.first_num_layers = f, .last_num_layers = l};
    T_CHECK(f > 0 && pp_layout_validate(&sug, 30, 4, 1) == MTC_OK);
    pp_layout_suggest(hint, sizeof hint, 80, 16, 2);
    p = strstr(hint, "first-pipeline-num-layers ");
    f = p ? atoi(p + strlen("first-pipeline-num-layers ")) : 0;
    p = strstr(hint, "last-pipeline-num-layers ");
    l = p ? atoi(p + strlen("last-pipeline-num-layers ")) : 0;
    sug = (pp_layout_args){.first_num_layers = f, .last_num_layers = l};
    T_CHECKF(f > 0 && pp_layout_validate(&sug, 80, 16, 2) == MTC_OK, "%s", hint);

    pp_layout_args u = {.first_num_layers = 3};
    T_CHECK(refused(&u, 10, 3, 1,
                    "number of layers at middle stage: 7 must be divisible by the "
                    "middle pipeline model parallel size 2"));
    T_CHECK(refused(&u, 9, 2, 2,
                    "number of layers at first stage: 3 must be divisible by virtual "
                    "pipeline parallel degree"));
    pp_layout_args fl = {.first_num_layers = 2, .last_num_layers = 2};
    T_CHECK(refused(&fl, 5, 2, 1, "Mismatch: 1 middle layers remaining but 0 middle PP stages"));
    T_CHECK(refused(&fl, 3, 3, 1, "exceed num-layers=3"));
    T_CHECK(refused(&u, 4, 1, 1, "needs --pipeline-model-parallel-size > 1"));
    pp_layout_args ue = {.first_num_layers = 2, .account_for_embedding = 1};
    T_CHECK(refused(&ue, 4, 2, 1, "cannot be set at the same time with"));
    pp_layout_args e = {.account_for_embedding = 1};
    T_CHECK(refused(&e, 4, 2, 1, "num_layers: 5 after enable"));
    pp_layout_args el = {.account_for_embedding = 1, .account_for_loss = 1};
    T_CHECK(refused(&el, 4, 2, 2, "number of layers on each pipeline rank: 3 must be divisible"));

    pp_layout_args s = {.layout = "Et|tL"};
    pp_layout_args sc = {.layout = "Et|tL", .last_num_layers = 1};
    T_CHECK(refused(&sc, 2, 2, 1, "pipeline_model_parallel_layout cannot be set with other"));
    T_CHECK(refused(&s, 2, 4, 1, "must be divisible by pipeline_model_parallel_size"));
    T_CHECK(refused(&s, 3, 2, 1, "Number of decoder layers 2 must match num_layers 3"));
    T_CHECK(refused(&s, 2, 1, 1, "conflicts with pipeline_model_parallel_layout"));
    pp_layout_args s2 = {.layout = "tE|tL"};
    T_CHECK(refused(&s2, 2, 2, 1, "The first layer must be embedding, but got decoder"));
    pp_layout_args s3 = {.layout = "Et|Lt"};
    T_CHECK(refused(&s3, 2, 2, 1, "The last layer must be loss, but got decoder"));
    pp_layout_args s4 = {.layout = "EtE|tL"};
    T_CHECK(refused(&s4, 2, 2, 1, "Embedding must be specified exactly once"));
    pp_layout_args s5 = {.layout = "EtL|tL"};
    T_CHECK(refused(&s5, 2, 2, 1, "Loss must be specified exactly once"));
    pp_layout_args s6 = {.layout = "Et|txL"};
    T_CHECK(refused(&s6, 2, 2, 1, "invalid layer character 'x'"));
    pp_layout_args s7 = {.layout = "Et*3|(tt|)*29,m|L"}; /* Megatron's DeepSeek-V3 example */
    T_CHECK(refused(&s7, 61, 16, 2, "Number of mtp layers in layout must match mtp_num_layers"));
    /* MTP: its count, after the decoder, all in one stage, on its rank's
     * last virtual stage; before the loss's stage it is Megatron's
     * standalone MTP stage, whose 1 + D states travel on to the loss */
    s7.mtp_num_layers = 1;
    pp_layout_stage st7[32];
    T_CHECK(pp_layout_build(st7, &s7, 61, 16, 2) == MTC_OK && st7[30].num_mtp == 1 &&
            st7[31].num_mtp == 0 && st7[30].out_states == 2 && st7[31].in_states == 2 &&
            st7[30].in_states == 1 && st7[29].out_states == 1 && st7[31].has_loss);
    T_CHECK(pp_layout_mtp_standalone_rank(&s7, 61, 16, 2) == 14);
    size_t *mc = NULL, mmax = 0;
    T_CHECK(pp_layout_message_counts(&mc, &mmax, 10, &s7, 61, 16, 2) == MTC_OK && mc &&
            mmax == 20 && mc[29] == 10 && mc[30] == 20 && mc[0] == 10);
    free(mc);
    pp_layout_args m1 = {.layout = "Et|tmL", .mtp_num_layers = 1};
    pp_layout_stage ms[2];
    T_CHECK(pp_layout_build(ms, &m1, 2, 2, 1) == MTC_OK && ms[1].num_mtp == 1 &&
            ms[0].num_mtp == 0 && ms[1].num_layers == 1);
    pp_layout_args m2 = {.layout = "Et|mtL", .mtp_num_layers = 1};
    T_CHECK(refused(&m2, 2, 2, 1, "decoder layers must be placed before MTP layers"));
    pp_layout_args m3 = {.layout = "Etm|tmL", .mtp_num_layers = 2};
    T_CHECK(refused(&m3, 2, 2, 1, "decoder layers must be placed before MTP layers"));
    pp_layout_args m4 = {.layout = "Et|tmm||L", .mtp_num_layers = 2};
    pp_layout_stage st4[4];
    T_CHECK(pp_layout_build(st4, &m4, 2, 4, 1) == MTC_OK && st4[1].num_mtp == 2 &&
            st4[1].out_states == 3 && st4[2].in_states == 3 && st4[2].out_states == 3 &&
            st4[3].in_states == 3 && st4[0].out_states == 1);
    T_CHECK(pp_layout_mtp_standalone_rank(&m4, 2, 4, 1) == 1);
    T_CHECK(pp_layout_mtp_standalone_rank(&m1, 2, 2, 1) == -1); /* MTP with the loss */
    T_CHECK(pp_layout_message_counts(&mc, &mmax, 10, &m1, 2, 2, 1) == MTC_OK && !mc && mmax == 10);
    T_CHECK(refused(&m4, 2, 2, 2, "MTP should be always in the last virtual pipeline stage"));
    pp_layout_args m5 = {.layout = "Et|tmL", .mtp_num_layers = 2};
    T_CHECK(refused(&m5, 2, 2, 1, "Number of mtp layers in layout must match"));
    pp_layout_args s8 = {.layout = "Et*99999|L"};
    T_CHECK(refused(&s8, 99999, 2, 1, "expands to more than"));
    /* empty stages are valid (train runs them as pass-through chunks) */
    pp_layout_args s9 = {.layout = "Et||t|L"};
    pp_layout_stage st9[4];
    T_CHECK(pp_layout_build(st9, &s9, 2, 2, 2) == MTC_OK && st9[1].num_layers == 0 &&
            !st9[1].has_embedding && !st9[1].has_loss && st9[3].num_layers == 0 && st9[3].has_loss);
}

/* stage counts of a layout over pp ranks (vpp derived) */
static int counts_of(const char *layout, int L, int pp, int *cnt, int *nst) {
    pp_layout_args a = {.layout = layout};
    int ns = 0;
    if (pp_layout_num_stages(&ns, layout) != MTC_OK) return -1;
    pp_layout_stage st[64];
    if (ns > 64 || pp_layout_build(st, &a, L, pp, ns / pp) != MTC_OK) return -1;
    int first = 0;
    for (int s = 0; s < ns; s++) {
        if (st[s].first_layer != first) return -1; /* prefix sums in stage order */
        cnt[s] = st[s].num_layers, first += cnt[s];
        if (st[s].has_embedding != (s == 0) || st[s].has_loss != (s == ns - 1)) return -1;
    }
    *nst = ns;
    return 0;
}

static void test_strings(void) {
    int c[64], n = 0;
    /* parse_str_to_list's own examples, in E/t/L symbols */
    T_CHECK(counts_of("E(t|t)*2,L", 4, 3, c, &n) == 0 && n == 3 && c[0] == 1 && c[1] == 2 &&
            c[2] == 1);
    T_CHECK(counts_of("E(tt)*3|L", 6, 2, c, &n) == 0 && n == 2 && c[0] == 6 && c[1] == 0);
    T_CHECK(counts_of("Et,(tt|)*2L", 5, 3, c, &n) == 0 && n == 3 && c[0] == 3 && c[1] == 2 &&
            c[2] == 0);
    T_CHECK(counts_of("E(|tt)*2,ttL", 6, 3, c, &n) == 0 && n == 3 && c[0] == 0 && c[1] == 2 &&
            c[2] == 4);
    T_CHECK(counts_of("Et*3|t*0|L", 3, 3, c, &n) == 0 && c[0] == 3 && c[1] == 0 && c[2] == 0);
    /* the DeepSeek-V3 example with its MTP stage as a decoder stage:
     * pp 16 x vpp 2, stage s = vp * 16 + rank */
    T_CHECK(counts_of("Et*3|(tt|)*29,t|L", 62, 16, c, &n) == 0 && n == 32);
    int ok = n == 32 && c[0] == 3 && c[30] == 1 && c[31] == 0;
    for (int s = 1; s < 30; s++)
        ok &= c[s] == 2;
    T_CHECK(ok);
    pp_layout_stage st;
    pp_layout_args ds = {.layout = "Et*3|(tt|)*29,t|L"};
    /* pp rank 0's second chunk is stage 16: after 3 + 15 * 2 layers */
    T_CHECK(pp_layout_stage_get(&st, &ds, 62, 16, 2, 16) == MTC_OK && st.first_layer == 33 &&
            st.num_layers == 2);
    /* the derived vpp through training's argument rules */
    int vpp = 0;
    pp_vpp_args va = {.pp = 16, .num_layers = 62, .overlap_p2p_comm = 1, .split = &ds};
    T_CHECK(pp_vpp_from_args(&vpp, &va) == MTC_OK && vpp == 2);
    va.virtual_stages_per_rank = 2;
    T_CHECK(pp_vpp_from_args(&vpp, &va) == MTC_ERR_INVALID_ARGUMENT &&
            strstr(mtc_error_detail(), "args.pipeline_model_parallel_layout=Et*3|(tt|)*29,t|L"));
    pp_layout_args odd = {.layout = "Et|t|tL"};
    pp_vpp_args vb = {.pp = 2, .num_layers = 3, .overlap_p2p_comm = 1, .split = &odd};
    T_CHECK(pp_vpp_from_args(&vpp, &vb) == MTC_ERR_INVALID_ARGUMENT &&
            strstr(mtc_error_detail(), "num_stages=3"));
    pp_layout_args un = {.first_num_layers = 3};
    pp_vpp_args vc = {.pp = 3, .num_layers = 7, .overlap_p2p_comm = 1, .split = &un};
    T_CHECK(pp_vpp_from_args(&vpp, &vc) == MTC_OK && vpp == 1); /* 7 % 3: uneven is allowed */
    vc.layers_per_virtual_stage = 1;
    T_CHECK(pp_vpp_from_args(&vpp, &vc) == MTC_ERR_INVALID_ARGUMENT &&
            strstr(mtc_error_detail(), "please use --num-virtual-stages-per-pipeline-rank"));
}

/* Megatron's pretty_repr shape: a header with vpp > 1, equal rows merged */
static void test_describe(void) {
    char buf[4096];
    pp_layout_args ds = {.layout = "Et*3|(tt|)*29,t|L"};
    T_CHECK(pp_layout_describe(buf, sizeof buf, &ds, 62, 16, 2) == MTC_OK);
    int lines = 1;
    for (const char *p = buf; *p; p++)
        lines += *p == '\n';
    T_CHECKF(lines == 5, "%s", buf); /* header, rank 0, 1-13, 14, 15 */
    T_CHECK(strstr(buf, "VPP rank 0") && strstr(buf, "VPP rank 1"));
    /* columns aligned on the header's: row "PP rank 0" and "PP rank 15" */
    const char *hdr = buf, *r0 = strstr(buf, "\nPP rank 0 "), *r15 = strstr(buf, "\nPP rank 15 ");
    T_CHECK(r0 && r15);
    if (r0 && r15) {
        long c1 = strstr(hdr, "VPP rank 0") - hdr, c2 = strstr(hdr, "VPP rank 1") - hdr;
        T_CHECK(!strncmp(r0 + 1 + c1, "embedding,decoder*3 ", 20));
        T_CHECK(!strncmp(r0 + 1 + c2, "decoder*2\n", 10));
        T_CHECK(!strncmp(r15 + 1 + c1, "decoder*2 ", 10));
        T_CHECK(!strcmp(r15 + 1 + c2, "loss")); /* the last line, no trailing spaces */
        /* 8 spaces between the widest entries of adjacent columns */
        T_CHECK(c1 == (long)strlen("PP rank 1-13") + 8);
        T_CHECK(c2 == c1 + (long)strlen("embedding,decoder*3") + 8);
    }
    T_CHECK(strstr(buf, "PP rank 1-13"));
    pp_layout_args e = {.layout = "E|tt|t|L"};
    T_CHECK(pp_layout_describe(buf, sizeof buf, &e, 3, 2, 2) == MTC_OK);
    T_CHECKF(strstr(buf, "PP rank 0        embedding         decoder\n") != NULL, "%s", buf);
    pp_layout_args em = {.layout = "Et||t|L"};
    T_CHECK(pp_layout_describe(buf, sizeof buf, &em, 2, 2, 2) == MTC_OK &&
            strstr(buf, "(empty stage)"));
    T_CHECK(pp_layout_describe(buf, sizeof buf, NULL, 8, 4, 1) == MTC_OK &&
            strstr(buf, "PP rank 1-2        decoder*2") && !strstr(buf, "VPP"));
    pp_layout_name(buf, sizeof buf, &(pp_layout_args){.first_num_layers = 3, .last_num_layers = 5});
    T_CHECK(!strcmp(buf, "uneven: first 3, last 5"));
}

int main(void) {
    test_even_is_the_old_split();
    test_against_megatron();
    test_refusals();
    test_strings();
    test_describe();
    return T_DONE();
}
