/* tests/ckpt/test_ckpt_hf.c - Hugging Face safetensors export and import.
 *
 * Six tiny models with every weight perturbed (no all-ones norms, no zero
 * biases): a GPT-2, a Llama (GQA 2 key/value groups over 4 heads, SwiGLU,
 * RoPE, untied head), and two Llama MoE models: 4 experts top-2 in every
 * layer (exported as MixtralForCausalLM) and one with q/k/v biases, top-k
 * after the softmax, a shared expert and a dense second layer
 * (Qwen2MoeForCausalLM); and two with --qk-layernorm: the Llama as
 * Qwen3ForCausalLM, and an MoE one with a dense second layer and top-k after
 * the softmax as Qwen3MoeForCausalLM; and a DeepSeek-V3 shape
 * (DeepseekV3ForCausalLM): multi-latent attention with both latents and
 * YaRN (a concentration factor, written as attention_factor), a dense first
 * layer, then 4 experts top-2 in 2 groups (1 kept) with sigmoid scores, a
 * positive expert bias, scaling 2.5 and a shared expert, and one MTP depth
 * (which round-trips with the rest; the reader ignores it). For each:
 *   - export F32 -> import: every tensor bit for bit (the vocabulary's
 *     padding rows are not exported and come back zero);
 *   - sharded export (a 20 kB limit: several files and the index) -> the same;
 *   - BF16 export -> import: each value is the bf16 rounding of the original;
 *   - mtc's logits of fixed tokens against tests/data/ckpt/hf_logits.txt,
 *     made by tests/reference/hf_reader.py (an independent reader of the
 *     exported folder: the safetensors header parsed by hand, GPT-2 and
 *     Llama written on Hugging Face's conventions in PyTorch) to 1e-5.
 * `test_ckpt_hf --export DIR` writes DIR/<name> of each for that script. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "ckpt/hf.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "test.h"

#define T_LEN 8
static const int TOKENS[T_LEN] = {3, 17, 42, 5, 60, 11, 0, 33};

static mtc_model *make(int kind) {
    int llama = kind > 0;
    mtc_model_config c = {.num_layers = 2,
                          .hidden_size = 32,
                          .num_heads = 4,
                          .ffn_hidden_size = llama ? 48 : 128,
                          .seq_length = T_LEN,
                          .max_position_embeddings = 16,
                          .vocab_size = 61,
                          .padded_vocab_size = 64,
                          .init_std = 0.2f};
    if (llama) {
        c.normalization = MTC_NORM_RMSNORM, c.position_embedding = MTC_POS_ROPE;
        c.swiglu = 1, c.num_query_groups = 2, c.untie_embeddings = 1, c.disable_bias_linear = 1;
        c.norm_epsilon = 1e-6f, c.rotary_base = 10000;
    }
    if (kind == 6) { /* DeepSeek-V3 */
        c.num_query_groups = 0;
        c.mla = (mtc_mla_config){.enabled = 1,
                                 .q_lora_rank = 12,
                                 .kv_lora_rank = 10,
                                 .qk_head_dim = 6,
                                 .qk_pos_emb_head_dim = 4,
                                 .v_head_dim = 5,
                                 .latent_norm = 1,
                                 .rope_yarn = 1,
                                 .rotary_scaling_factor = 4,
                                 .mscale = 1,
                                 .mscale_all_dim = 0.7f,
                                 .beta_fast = 32,
                                 .beta_slow = 1,
                                 .original_max_position_embeddings = 8};
        c.moe.num_experts = 4, c.moe.topk = 2, c.moe.ffn_hidden_size = 24;
        c.moe.score = MOE_SCORE_SIGMOID, c.moe.expert_bias = 1, c.moe.num_groups = 2;
        c.moe.group_topk = 1, c.moe.topk_scaling = 2.5f, c.moe.shared_ffn = 24;
        c.moe.pattern_len = 2, c.moe.pattern[0] = 0, c.moe.pattern[1] = 1;
        c.mtp_num_layers = 1, c.mtp_loss_scaling_factor = 0.1f;
    }
    if (kind >= 4 && kind < 6) c.qk_layernorm = 1; /* Qwen3 (4), Qwen3-MoE (5) */
    if (kind >= 2 && kind != 4 && kind != 6) { /* MoE: Mixtral (2), Qwen2-MoE (3), Qwen3-MoE (5) */
        c.moe.num_experts = 4, c.moe.topk = 2, c.moe.ffn_hidden_size = 24;
        if (kind == 5) { /* a dense second layer, norm_topk_prob false */
            c.moe.pre_softmax = 1;
            c.moe.pattern_len = 2, c.moe.pattern[0] = 1, c.moe.pattern[1] = 0;
        } else if (kind == 3) {
            c.add_qkv_bias = 1, c.moe.pre_softmax = 1, c.moe.shared_ffn = 16;
            c.moe.pattern_len = 2, c.moe.pattern[0] = 1, c.moe.pattern[1] = 0;
        } else {
            c.ffn_hidden_size = 24; /* Mixtral's intermediate_size is the experts' */
        }
    }
    mtc_model *m = NULL;
    if (mtc_model_init(&c, 1, 1, NULL, &m) != MTC_OK) return NULL;
    mtc_model_init_params(m, 7);
    for (size_t i = 0; i < m->reg.total; i++) /* every tensor non-trivial */
        m->params[i] += 0.1f * mtc_rng_normal(99, 1, i);
    for (int i = 0; i < m->reg.count; i++) { /* positive: biased scores stay > 0, where HF's
                                                 0-masking of other groups is Megatron's -inf */
        const mtc_param *p = &m->reg.params[i];
        if (strstr(p->name, "expert_bias"))
            for (size_t k = 0; k < p->numel; k++)
                m->params[p->offset + k] = 0.01f * (float)(k + 1);
    }
    return m;
}

static int is_vocab(const mtc_param *p) { return p->split_rule == MTC_SPLIT_VOCAB; }

/* b's params against a's: exact (bf16 = 0) or a's bf16 rounding; the
 * vocabulary's padding rows must be zero in b. */
static void same_params(const char *what, const mtc_model *a, const mtc_model *b, int bf16) {
    int bad = 0;
    for (int i = 0; i < a->reg.count; i++) {
        const mtc_param *p = &a->reg.params[i];
        size_t real = is_vocab(p) ? (size_t)a->cfg.vocab_size * (size_t)p->shape[1] : p->numel;
        for (size_t k = 0; k < p->numel; k++) {
            float x = a->params[p->offset + k], y = b->params[p->offset + k];
            float want = k >= real ? 0.0f : bf16 ? mtc_bf16_to_f32(mtc_f32_to_bf16(x)) : x;
            if (memcmp(&want, &y, 4) && bad++ < 3)
                fprintf(stderr, "%s: %s[%zu] = %.9g, expected %.9g\n", what, p->name, k, y, want);
        }
    }
    T_CHECKF(bad == 0, "%s: %d values differ", what, bad);
}

static void round_trip(mtc_model *m, const char *dir, const mtc_hf_export_opts *o,
                       const char *what) {
    T_CHECK(mtc_hf_export(m, "byte", dir, o) == MTC_OK);
    mtc_model *b = NULL;
    char tok[MTC_CKPT_TOKENIZER_MAX];
    mtc_result_t rc = mtc_hf_import(dir, T_LEN, 64, &b, tok);
    T_CHECKF(rc == MTC_OK, "%s: %s", what, mtc_error_detail());
    if (!b) return;
    T_CHECK(!strcmp(tok, "byte"));
    T_CHECK(
        !memcmp(&b->reg.params[0].shape, &m->reg.params[0].shape, sizeof m->reg.params[0].shape));
    same_params(what, m, b, o->bf16);
    mtc_model_free(b);
}

/* A config.json whose layers the files cannot hold (here 10000) is
 * refused before anything is allocated. */
static void too_many_layers(const char *dir, const char *key) {
    char path[4200], text[8192];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    char *at = strstr(text, key), *num = at ? at + strlen(key) : NULL;
    T_CHECKF(num != NULL, "%s has no %s", path, key);
    if (!num) return;
    while (*num == ':' || *num == ' ' || *num == '\t')
        num++;
    char rest[8192];
    snprintf(rest, sizeof rest, "10000%s", num + strspn(num, "0123456789"));
    snprintf(num, sizeof text - (size_t)(num - text), "%s", rest);
    f = fopen(path, "w");
    T_CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
    mtc_model *b = NULL;
    char tok[MTC_CKPT_TOKENIZER_MAX];
    mtc_result_t rc = mtc_hf_import(dir, T_LEN, 64, &b, tok);
    T_CHECKF(rc == MTC_ERR_FORMAT && !b && strstr(mtc_error_detail(), "does not belong"),
             "%s with 10000 layers: %d %s", dir, (int)rc, mtc_error_detail());
    printf("%s\n", mtc_error_detail());
}

/* The fixture's logits of model `name`: T_LEN x V values. */
static int read_fixture(const char *name, float *out, int n) {
    FILE *f = fopen("tests/data/ckpt/hf_logits.txt", "r");
    if (!f) return 0;
    char key[32];
    int cnt, got = 0;
    while (fscanf(f, "%31s %d", key, &cnt) == 2) {
        int mine = !strcmp(key, name) && cnt == n;
        for (int i = 0; i < cnt; i++) {
            float v;
            if (fscanf(f, "%f", &v) != 1) break;
            if (mine) out[i] = v, got++;
        }
        if (mine) break;
    }
    fclose(f);
    return got == n;
}

static void against_reference(mtc_model *m, const char *name) {
    int V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size, n = T_LEN * V;
    float *ref = malloc((size_t)n * sizeof(float));
    T_CHECKF(read_fixture(name, ref, n), "tests/data/ckpt/hf_logits.txt lacks %s", name);
    mtc_model_pass pass = {0};
    mtc_model_forward(m, 0, TOKENS, NULL, 1, T_LEN, &pass);
    const float *lg = mtc_model_logits(m);
    double maxerr = 0, scale = 0;
    for (int t = 0; t < T_LEN; t++)
        for (int v = 0; v < V; v++) {
            double e = fabs((double)lg[t * Vp + v] - ref[t * V + v]);
            if (e > maxerr) maxerr = e;
            if (fabs(ref[t * V + v]) > scale) scale = fabs(ref[t * V + v]);
        }
    T_CHECKF(maxerr <= 1e-5 * (scale > 1 ? scale : 1), "%s: logits differ by %.3g (scale %.3g)",
             name, maxerr, scale);
    printf("%s: logits of the exported model, PyTorch reader vs mtc: max error %.3g (scale %.3g)\n",
           name, maxerr, scale);
    free(ref);
}

int main(int argc, char **argv) {
    enum { NK = 7 };
    static const char *names[NK] = {"gpt2",  "llama",    "mixtral",    "qwen2moe",
                                    "qwen3", "qwen3moe", "deepseek_v3"};
    mtc_model *ms[NK];
    int all = 1;
    for (int k = 0; k < NK; k++)
        ms[k] = make(k), all = all && ms[k];
    T_CHECK(all);
    if (!all) return T_DONE();
    if (argc == 3 && !strcmp(argv[1], "--export")) { /* for tests/reference/hf_reader.py */
        char d[4096];
        mtc_hf_export_opts o = {0};
        for (int k = 0; k < NK; k++) {
            snprintf(d, sizeof d, "%s/%s", argv[2], names[k]);
            T_CHECKF(mtc_hf_export(ms[k], "byte", d, &o) == MTC_OK, "%s", mtc_error_detail());
        }
        printf("tokens:");
        for (int i = 0; i < T_LEN; i++)
            printf(" %d", TOKENS[i]);
        printf("\n");
        return T_DONE();
    }
    char tmpl[] = "/tmp/mtc_hf_XXXXXX";
    char *dir = mkdtemp(tmpl);
    T_CHECK(dir != NULL);
    if (!dir) return T_DONE();
    char d[4096];
    for (int k = 0; k < NK; k++) {
        mtc_model *m = ms[k];
        const char *name = names[k];
        mtc_hf_export_opts f32 = {0}, shards = {.max_shard_bytes = 20000}, bf = {.bf16 = 1};
        snprintf(d, sizeof d, "%s/%s_f32", dir, name);
        round_trip(m, d, &f32, "f32");
        snprintf(d, sizeof d, "%s/%s_sharded/model.safetensors.index.json", dir, name);
        char dd[4096];
        snprintf(dd, sizeof dd, "%s/%s_sharded", dir, name);
        round_trip(m, dd, &shards, "sharded");
        T_CHECKF(access(d, R_OK) == 0, "%s has no index", dd);
        snprintf(d, sizeof d, "%s/%s_bf16", dir, name);
        round_trip(m, d, &bf, "bf16");
        against_reference(m, name);
        if (k < 2) too_many_layers(d, k ? "\"num_hidden_layers\"" : "\"n_layer\"");
    }
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    T_CHECK(system(cmd) == 0);
    for (int k = 0; k < NK; k++)
        mtc_model_free(ms[k]);
    return T_DONE();
}
