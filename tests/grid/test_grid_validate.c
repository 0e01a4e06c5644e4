/* tests/grid/test_grid_validate.c - every validation rule of section (b)
 * that applies outside PyTorch, and the model-level rules, triggered once
 * each: refused with MTC_ERR_INVALID_ARGUMENT, one line, Megatron's message
 * inside, and the nearest valid choices (checked against values worked out
 * by hand from the rule). Also the SVG: well-formed (balanced tags, quoted
 * attributes) and carrying every rank. */
#include <stdlib.h>
#include <string.h>

#include "grid/grid.h"
#include "test.h"

static mtc_grid_config cfg(int W, int tp, int pp, int cp, int ep, int etp, const char *order) {
    mtc_grid_config c;
    mtc_grid_config_default(&c);
    c.world_size = W, c.tp = tp, c.pp = pp, c.cp = cp, c.ep = ep, c.etp = etp, c.order = order;
    return c;
}

/* Refused, one line, containing each of the NULL-terminated substrings. */
static void refused(const mtc_grid_config *c, const char *const *want) {
    mtc_grid_spec s;
    mtc_error_clear();
    mtc_result_t rc = mtc_grid_spec_init(&s, c);
    const char *m = mtc_error_detail();
    T_CHECKF(rc == MTC_ERR_INVALID_ARGUMENT, "not refused (rc %d): expected '%s'", rc, want[0]);
    T_CHECKF(!strchr(m, '\n') && strlen(m) > 0, "not one line: %s", m);
    for (int i = 0; want[i]; i++)
        T_CHECKF(strstr(m, want[i]) != NULL, "'%s' not in: %s", want[i], m);
}
#define REFUSED(c, ...) refused(&(c), (const char *const[]){__VA_ARGS__, NULL})

static void test_rules(void) {
    mtc_grid_config c;
    /* rule 4: 8 % (2*2*4); tp alone can only be 1 (pp*cp = 8), cp can be 1 or 2 */
    c = cfg(8, 2, 2, 4, 1, 0, NULL);
    REFUSED(c, "world_size (8) is not divisible by 16", "--tp 1,", "--pp 1,", "--cp 1 2",
            "--world-size 16");
    /* rule 5 */
    c = cfg(8, 1, 1, 1, 1, 0, NULL);
    c.vpp = 2;
    REFUSED(c, "pipeline-model-parallel size should be greater than 1 with interleaved schedule",
            "--pp 2 4 8");
    /* rule 6, dense generator (cp) and expert generator (ep; etp with tp 1) */
    c = cfg(8, 1, 2, 2, 1, 0, "tp-pp-dp");
    REFUSED(c, "The size of (cp) is (2), but you haven'tspecified the order (tp-pp-dp).",
            "--order tp-cp-pp-dp");
    c = cfg(8, 1, 2, 1, 2, 0, "tp-pp-dp");
    REFUSED(c, "The size of (ep) is (2), but you haven'tspecified the order (tp-pp-dp).",
            "--order tp-ep-pp-dp");
    c = cfg(8, 1, 2, 1, 1, 2, "pp-dp");
    REFUSED(c, "The size of (tp) is (2), but you haven'tspecified the order (pp-dp).", "expert");
    /* rule 6 keeps the user's spelling in Megatron's message */
    c = cfg(8, 1, 2, 2, 1, 0, "TP-PP-DP");
    REFUSED(c, "but you haven'tspecified the order (TP-PP-DP).");
    /* rule 7, and a repeated token */
    c = cfg(8, 1, 2, 1, 1, 0, "tp-xx-dp-pp");
    REFUSED(c, "KeyError: 'xx'", "tp cp ep dp pp");
    c = cfg(8, 1, 2, 1, 1, 0, "tp-dp-dp-pp");
    REFUSED(c, "names 'dp' twice");
    /* rule 8: 8 % (2*3*1); ep with etp 2 may be 1 2 4 */
    c = cfg(8, 2, 1, 1, 3, 0, NULL);
    REFUSED(c, "world_size (8) is not divisible by expert_tensor_model_pipeline_parallel size (6)",
            "--ep 1 2 4");
    /* rule 9: dp = 4, edp = 2, order not pp-last */
    c = cfg(8, 1, 2, 1, 2, 0, "tp-cp-ep-pp-dp");
    REFUSED(c,
            "When not using pp-last rank ordering, the data parallel size of the attention and moe "
            "layers "
            "must be the same",
            "data_parallel_size 4", "expert_data_parallel_size 2", "--order tp-cp-ep-dp-pp");
    /* rule 9 reads the order string as given: "...-PP" does not end in "pp" */
    c = cfg(8, 1, 2, 1, 2, 0, "TP-CP-EP-DP-PP");
    REFUSED(c, "When not using pp-last rank ordering");
    /* rule 10 */
    c = cfg(8, 2, 2, 1, 2, 1, "tp-cp-pp-ep-dp");
    REFUSED(c,
            "Pipeline parallel groups are expected to be the same for Non-Expert and Expert part, "
            "but got "
            "[[0, 2], [1, 3], [4, 6], [5, 7]] and [[0, 1], [2, 3], [4, 5], [6, 7]]",
            "--order tp-cp-ep-dp-pp");
    /* rule 11: dp*cp = 12; instances must divide gcd(12, edp 12) */
    c = cfg(12, 1, 1, 1, 1, 0, NULL);
    c.num_dist_opt_instances = 5;
    REFUSED(c, "Data parallel size should be divisible by partial DistOpt shard factor",
            "(valid: 1 2 3 4 6 12)");
    /* rule 13 */
    c = cfg(16, 1, 1, 4, 1, 0, NULL);
    c.n_hcp = 2, c.hcp[0] = 2, c.hcp[1] = 4;
    REFUSED(c, "hierarchical_context_parallel_sizes", "multiply to 8", "2,2 or 4");
    /* rule 16: dp*cp = 16 divisible by 4, but edp = 16/8 = 2 */
    c = cfg(16, 1, 1, 1, 8, 0, NULL);
    c.num_dist_opt_instances = 4;
    REFUSED(c, "Expert data parallel size should be divisible by partial DistOpt shard factor",
            "(valid: 1 2)");
    /* sizes */
    c = cfg(0, 1, 1, 1, 1, 0, NULL);
    REFUSED(c, "--world-size is 0");
    c = cfg(8, 1, 1, 1, 1, 0,
            "tp-cp-ep-dp-pp-tp-cp-ep-dp-pp-tp-cp-ep-dp-pp-tp-cp-ep-dp-pp-tp-cp-ep-dp-pp");
    REFUSED(c, "--order is 74 characters long");
    c = cfg(8, -2, 1, 1, 1, 0, NULL);
    REFUSED(c, "--tensor-model-parallel-size is -2");
}

static void test_model_rules(void) {
    mtc_grid_config c = cfg(16, 4, 2, 2, 2, 0, NULL);
    mtc_grid_spec s;
    T_CHECK(mtc_grid_spec_init(&s, &c) == MTC_OK);
    T_CHECK(mtc_grid_validate_model(&s, 12, 64, 8, 8, 2) == MTC_OK);
    T_CHECK(mtc_grid_validate_model(&s, 10, 0, 0, 0, 0) == MTC_ERR_INVALID_ARGUMENT);
    /* heads 10: tp must divide gcd(10, 16/(2*2)=4) = 2 */
    T_CHECKF(strstr(mtc_error_detail(),
                    "num-attention-heads=10 is not divisible by tensor-model-parallel-size=4 "
                    "(valid tp: 1 2)"),
             "%s", mtc_error_detail());
    T_CHECK(mtc_grid_validate_model(&s, 0, 30, 0, 0, 0) == MTC_ERR_INVALID_ARGUMENT);
    /* 30 % 4 != 0: nearest 28 or 32; cp dividing gcd(15, 16/8=2) = 1 */
    T_CHECKF(strstr(mtc_error_detail(),
                    "seq-length=30 is not divisible by 2*context-parallel-size = 4") &&
                 strstr(mtc_error_detail(), "--seq-length 28 or 32") &&
                 strstr(mtc_error_detail(), "cp: 1)"),
             "%s", mtc_error_detail());
    T_CHECK(mtc_grid_validate_model(&s, 0, 0, 6, 0, 0) == MTC_OK);
    /* experts 6 with ep 2: fine; with ep 4 (W 16): ep must divide gcd(6, 16) */
    mtc_grid_config c4 = cfg(16, 1, 1, 1, 4, 0, NULL);
    mtc_grid_spec s4;
    T_CHECK(mtc_grid_spec_init(&s4, &c4) == MTC_OK);
    T_CHECK(mtc_grid_validate_model(&s4, 0, 0, 6, 0, 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECKF(strstr(mtc_error_detail(),
                    "num-experts=6 is not divisible by expert-model-parallel-size=4 "
                    "(valid ep: 1 2)"),
             "%s", mtc_error_detail());
    T_CHECK(mtc_grid_validate_model(&s, 0, 0, 0, 6, 2) == MTC_ERR_INVALID_ARGUMENT);
    /* 6 layers, pp 2 vpp 2: 6 % 4; nearest 4 or 8; vpp dividing 3: 1 3 */
    T_CHECKF(
        strstr(mtc_error_detail(),
               "num-layers=6 is not divisible by pipeline-model-parallel-size*vpp = 2*2 = 4") &&
            strstr(mtc_error_detail(), "--num-layers 4 or 8, or vpp: 1 3"),
        "%s", mtc_error_detail());
    T_CHECK(mtc_grid_validate_model(&s, 0, 0, 0, 6, 0) == MTC_OK);
    /* seq rule only when cp > 1 */
    mtc_grid_config c1 = cfg(4, 1, 1, 1, 1, 0, NULL);
    T_CHECK(mtc_grid_spec_init(&s4, &c1) == MTC_OK);
    T_CHECK(mtc_grid_validate_model(&s4, 3, 31, 5, 7, 0) == MTC_OK);
}

/* Well-formedness: every '<' opens a tag that closes with '>' outside quotes,
 * element names balance as a stack, attributes are quoted, and '&' starts an
 * entity. Returns 1 when well-formed. */
static int xml_ok(const char *t) {
    char stack[64][32];
    int depth = 0, seen_root = 0;
    for (const char *p = t; *p; p++) {
        if (*p == '&') {
            const char *e = strchr(p, ';');
            if (!e || e - p > 8) return 0;
            continue;
        }
        if (*p != '<') continue;
        if (p[1] == '?') {
            p = strstr(p, "?>");
            if (!p) return 0;
            p++;
            continue;
        }
        int closing = p[1] == '/';
        const char *n = p + 1 + closing;
        size_t len = strcspn(n, " \t\n/>");
        if (len == 0 || len >= 32) return 0;
        const char *q = n + len;
        int inq = 0;
        for (; *q && (inq || *q != '>'); q++) {
            if (*q == '"')
                inq = !inq;
            else if (!inq && *q == '=' && q[1] != '"')
                return 0;
            else if (inq && *q == '<')
                return 0;
        }
        if (!*q) return 0;
        int selfclose = q[-1] == '/';
        if (closing) {
            if (depth == 0 || strncmp(stack[depth - 1], n, len) || stack[depth - 1][len]) return 0;
            depth--;
        } else if (!selfclose) {
            if (depth == 64) return 0;
            memcpy(stack[depth], n, len), stack[depth][len] = '\0', depth++;
            seen_root = 1;
        }
        p = q;
    }
    return depth == 0 && seen_root;
}

static void test_svg(void) {
    mtc_grid_config c = cfg(32, 4, 2, 2, 4, 1, NULL);
    mtc_grid_spec s;
    T_CHECK(mtc_grid_spec_init(&s, &c) == MTC_OK);
    mtc_grid_groups G;
    T_CHECK(mtc_grid_groups_build(&G, &s) == MTC_OK);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    T_CHECK(mtc_grid_render_svg(f, &s, &G, 8) == MTC_OK);
    fclose(f);
    T_CHECK(xml_ok(buf));
    T_CHECK(strstr(buf, "<svg") && strstr(buf, "</svg>"));
    for (int r = 0; r < 32; r++) {
        char want[32];
        snprintf(want, sizeof want, ">r%d</text>", r);
        T_CHECKF(strstr(buf, want) != NULL, "rank %d missing", r);
    }
    /* tp 4 with 8 per node: no TP group crosses; with 2 per node every one does */
    T_CHECK(strstr(buf, "stroke-dasharray=\"6 3\"/>\n<rect") == NULL);
    free(buf), buf = NULL;
    f = open_memstream(&buf, &len);
    T_CHECK(mtc_grid_render_svg(f, &s, &G, 2) == MTC_OK);
    fclose(f);
    T_CHECK(xml_ok(buf));
    T_CHECK(strstr(buf, "TENSOR_MODEL_PARALLEL_GROUP 8x4: 8 of 8 cross nodes") != NULL);
    /* the checker itself rejects broken documents */
    T_CHECK(!xml_ok("<svg><g></svg>"));
    T_CHECK(!xml_ok("<svg><rect x=1/></svg>"));
    T_CHECK(!xml_ok("<svg>a & b</svg>"));
    T_CHECK(xml_ok("<svg><g><rect x=\"1\"/></g></svg>"));
    free(buf);
    mtc_grid_groups_free(&G);
}

/* The example in the docstring of Megatron's create_hierarchical_groups:
 * 16 ranks, sizes [2, 2, 4] -> L0 [g0,g1],[g2,g3],...; L1 [g0,g2],[g1,g3],
 * [g4,g6],...; L2 [g0,g4,g8,g12],[g1,g5,g9,g13],... */
static void test_hierarchical_docstring(void) {
    mtc_grid_config c = cfg(16, 1, 1, 16, 1, 0, NULL);
    c.n_hcp = 3, c.hcp[0] = 2, c.hcp[1] = 2, c.hcp[2] = 4;
    mtc_grid_spec s;
    T_CHECK(mtc_grid_spec_init(&s, &c) == MTC_OK);
    mtc_grid_groups G;
    T_CHECK(mtc_grid_groups_build(&G, &s) == MTC_OK);
    const mtc_grid_group_set *l0 = mtc_grid_groups_find(&G, MTC_GROUP_HIER_CP, 0),
                             *l1 = mtc_grid_groups_find(&G, MTC_GROUP_HIER_CP, 1),
                             *l2 = mtc_grid_groups_find(&G, MTC_GROUP_HIER_CP, 2);
    T_CHECK(l0 && l1 && l2 && l0->count == 8 && l1->count == 8 && l2->count == 4);
    if (!(l0 && l1 && l2)) return;
    static const int e1[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
    static const int e2[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
    int bad = 0;
    for (int i = 0; i < 16; i++)
        bad |= l0->ranks[i] != i || l1->ranks[i] != e1[i] || l2->ranks[i] != e2[i];
    T_CHECK(!bad);
    T_CHECK(!strcmp(l2->name, "HIERARCHICAL_CONTEXT_PARALLEL_GROUP_L2"));
    /* Megatron's start-up line prints the sizes as a Python list */
    char line[512];
    mtc_grid_describe(line, sizeof line, &s);
    T_CHECKF(
        !strcmp(
            line,
            "using world size: 16, data-parallel size: 1, context-parallel size: 16, hierarchical "
            "context-parallel sizes: [2, 2, 4], tensor-model-parallel size: 1, "
            "pipeline-model-parallel size: 1"),
        "%s", line);
    /* they follow CONTEXT_PARALLEL_GROUP in creation order */
    T_CHECK(l0 == mtc_grid_groups_find(&G, MTC_GROUP_CP, 0) + 1);
    mtc_grid_groups_free(&G);
}

int main(void) {
    test_hierarchical_docstring();
    test_rules();
    test_model_rules();
    test_svg();
    return T_DONE();
}
