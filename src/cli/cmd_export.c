/* cli/cmd_export.c - `mtc export` and `mtc import`: a checkpoint (directory
 * or single-file model, its latest iteration's weights) to a Hugging Face
 * folder (model.safetensors + config.json, ckpt/hf.h) or a GGUF file for
 * llama.cpp (ckpt/gguf.h); and a Hugging Face folder back into an mtc
 * checkpoint directory that `mtc train --load` resumes in any layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "ckpt/gguf.h"
#include "ckpt/hf.h"
#include "ckpt/onnx.h"
#include "ckpt/state.h"
#include "ckpt/tok_files.h"
#include "cli/cli.h"
#include "core/outdir.h"
#include "core/outfile.h"
#include "data/tokenizer.h"

#include <errno.h>
#include <sys/stat.h>

/* The ONNX folder transformers.js loads: config.json (with
 * transformers.js_config.dtype naming the file), generation_config.json,
 * onnx/model.onnx (fp32) or onnx/model_fp16.onnx; the caller adds the
 * tokenizer files. */
static mtc_result_t onnx_folder(const mtc_model *m, const char *out, int f16, int64_t limit,
                                mtc_hf_config_opts *co) {
    MTC_CHECK(mtc_hf_supported(m, co->arch)); /* refused before anything is written */
    MTC_CHECK(mtc_onnx_supported(m));
    char path[4200];
    snprintf(path, sizeof path, "%s/onnx", out);
    if ((mkdir(out, 0755) != 0 && errno != EEXIST) || (mkdir(path, 0755) != 0 && errno != EEXIST))
        return mtc_error(MTC_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    co->torch_dtype = f16 ? "float16" : "float32";
    co->tjs_dtype = f16 ? "fp16" : "fp32";
    co->tjs_external = mtc_onnx_needs_external(m, f16, limit);
    MTC_CHECK(mtc_hf_write_config(m, out, co));
    snprintf(path, sizeof path, "%s/onnx/model%s.onnx", out, f16 ? "_fp16" : "");
    mtc_onnx_export_opts oo = {.f16 = f16, .external = co->tjs_external};
    return mtc_onnx_export(m, path, &oo);
}

/* llama.cpp's view of the model's tokenizer: every id below V spelled in
 * GPT-2's byte alphabet (an id without bytes, or beyond the tokenizer's
 * vocabulary, as an unused "[PAD<id>]"), added tokens as control tokens, the
 * BPE merges in rank order, eod as bos and eos. */
typedef struct {
    mtc_gguf_vocab v;
    char **tokens, **merges;
    int *types;
    float *scores; /* SentencePiece */
} gguf_vocab_owned;

static void gguf_vocab_free(gguf_vocab_owned *g) {
    for (int i = 0; g->tokens && i < g->v.n_tokens; i++)
        free(g->tokens[i]);
    for (size_t i = 0; g->merges && i < g->v.n_merges; i++)
        free(g->merges[i]);
    free(g->tokens), free(g->merges), free(g->types), free(g->scores);
}

/* SentencePiece as llama.cpp's "llama" (SPM) vocabulary: the pieces as they
 * are, their scores and types, no merges (data/tokenizer.h). */
static mtc_result_t gguf_vocab_spm(const data_tok *tok, int V, gguf_vocab_owned *g) {
    memset(g, 0, sizeof *g);
    g->tokens = calloc((size_t)V, sizeof *g->tokens);
    g->types = calloc((size_t)V, sizeof *g->types);
    g->scores = calloc((size_t)V, sizeof *g->scores);
    g->v.n_tokens = V;
    int ok = g->tokens && g->types && g->scores;
    for (int i = 0; ok && i < V; i++) {
        unsigned char scratch[8];
        const unsigned char *b;
        int n = data_tok_piece(tok, i, scratch, &b);
        if (n > 0 && data_tok_spm_piece_info(tok, i, &g->scores[i], &g->types[i]) == 0) {
            g->tokens[i] = strndup((const char *)b, (size_t)n);
        } else { /* padding beyond the vocabulary */
            char s[32];
            snprintf(s, sizeof s, "[PAD%d]", i);
            g->tokens[i] = strdup(s);
            g->types[i] = MTC_GGUF_TOKEN_UNUSED, g->scores[i] = 0;
        }
        ok = g->tokens[i] != NULL;
    }
    g->v.tokens = g->tokens, g->v.types = g->types, g->v.scores = g->scores;
    g->v.model = "llama", g->v.add_space_prefix = data_tok_spm_add_space_prefix(tok);
    g->v.unk = data_tok_spm_unk(tok), g->v.has_unk = g->v.unk >= 0 && g->v.unk < V;
    g->v.bos = g->v.eos = data_tok_eod(tok) < V ? data_tok_eod(tok) : -1;
    if (!ok) {
        gguf_vocab_free(g);
        return mtc_error(MTC_ERR_OUT_OF_MEMORY, "out of memory building the GGUF vocabulary");
    }
    return MTC_OK;
}

static char *spell_id(const data_tok *tok, int id) {
    unsigned char scratch[8];
    const unsigned char *b;
    int n = data_tok_piece(tok, id, scratch, &b);
    data_tok_text t = {0};
    if (n <= 0 || data_tok_gpt2_spell(b, (size_t)n, &t) != MTC_OK) {
        data_tok_text_free(&t);
        return NULL;
    }
    return t.s;
}

static mtc_result_t gguf_vocab_build(const data_tok *tok, int V, gguf_vocab_owned *g) {
    if (data_tok_kind_of(tok) == DATA_TOK_SENTENCEPIECE) return gguf_vocab_spm(tok, V, g);
    memset(g, 0, sizeof *g);
    int *pairs = NULL;
    size_t n_merges = 0;
    MTC_CHECK(data_tok_merges(tok, &pairs, &n_merges));
    g->tokens = calloc((size_t)V, sizeof *g->tokens);
    g->types = calloc((size_t)V, sizeof *g->types);
    g->merges = calloc(n_merges ? n_merges : 1, sizeof *g->merges);
    g->v.n_tokens = V;
    mtc_result_t rc = MTC_OK;
    if (!g->tokens || !g->types || !g->merges) rc = MTC_ERR_OUT_OF_MEMORY;
    for (int i = 0; rc == MTC_OK && i < V; i++) {
        g->tokens[i] = spell_id(tok, i);
        g->types[i] = data_tok_is_added(tok, i) ? MTC_GGUF_TOKEN_CONTROL : MTC_GGUF_TOKEN_NORMAL;
        if (!g->tokens[i]) { /* no bytes: a placeholder llama.cpp never produces */
            char s[32];
            snprintf(s, sizeof s, "[PAD%d]", i);
            g->tokens[i] = strdup(s);
            g->types[i] = MTC_GGUF_TOKEN_UNUSED;
            if (!g->tokens[i]) rc = MTC_ERR_OUT_OF_MEMORY;
        }
    }
    for (size_t k = 0; rc == MTC_OK && k < n_merges; k++) {
        char *a = spell_id(tok, pairs[2 * k]), *b = spell_id(tok, pairs[2 * k + 1]);
        size_t n = a && b ? strlen(a) + strlen(b) + 2 : 0;
        g->merges[k] = n ? malloc(n) : NULL;
        if (g->merges[k])
            snprintf(g->merges[k], n, "%s %s", a, b);
        else
            rc = MTC_ERR_OUT_OF_MEMORY;
        g->v.n_merges = k + 1;
        free(a), free(b);
    }
    free(pairs);
    g->v.tokens = g->tokens, g->v.types = g->types, g->v.merges = g->merges;
    g->v.bos = g->v.eos = data_tok_eod(tok) < V ? data_tok_eod(tok) : -1;
    /* TikTokenizer v2 is Mistral's tekken pattern, which llama.cpp knows by that name */
    if (data_tok_kind_of(tok) == DATA_TOK_TIKTOKEN) g->v.pre = "tekken";
    if (data_tok_kind_of(tok) == DATA_TOK_TIKTOKEN && strcmp(data_tok_tiktoken_pattern(tok), "v2"))
        fprintf(stderr, "mtc export: note: llama.cpp has no pre-tokenizer for TikTokenizer's v1 "
                        "pattern: the GGUF names tekken (v2), which splits some texts otherwise\n");
    if (rc != MTC_OK) {
        gguf_vocab_free(g);
        return mtc_error(rc, "out of memory building the GGUF vocabulary");
    }
    return MTC_OK;
}

int cli_cmd_export(int argc, char **argv) {
    const char *load = NULL, *format = NULL, *out = NULL, *dtype = "fp32", *arch = NULL;
    int64_t shard = 0;
    mtc_arg args[] = {
        {"load", NULL, MTC_ARG_STRING, &load, "DIR",
         "checkpoint directory (its latest iteration) or single-file model (required)", 0},
        {"format", NULL, MTC_ARG_STRING, &format, "F", "safetensors, gguf or onnx (required)", 0},
        {"out", NULL, MTC_ARG_STRING, &out, "PATH",
         "output folder (safetensors, onnx) or file (gguf) (required)", 0},
        {"dtype", NULL, MTC_ARG_STRING, &dtype, "T",
         "fp32 or bf16 (safetensors), fp32 or fp16 (gguf, onnx) (default fp32)", 0},
        {"hf-architecture", NULL, MTC_ARG_STRING, &arch, "CLASS",
         "an MoE model's class: MixtralForCausalLM, Qwen2MoeForCausalLM or Qwen3MoeForCausalLM "
         "(default: Qwen3-MoE with --qk-layernorm, else Mixtral when it holds the model)",
         0},
        {"max-shard-size", NULL, MTC_ARG_I64, &shard, "BYTES",
         "split model.safetensors above this size, with an index (default 5 GB); onnx: weights "
         "above it go to onnx/model.onnx_data (default 1.9 GB, under protobuf's 2 GB)",
         0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    int st = cli_parse("export", "--load DIR --format safetensors|gguf|onnx --out PATH [options]",
                       "Export a checkpoint's weights for Hugging Face transformers "
                       "(GPT2LMHeadModel, LlamaForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, "
                       "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM with its "
                       "MTP layers), llama.cpp (GGUF: gpt2, llama, qwen3, qwen3moe, qwen2moe, "
                       "deepseek, deepseek2) or ONNX Runtime / transformers.js; GGUF and ONNX "
                       "hold the main model without MTP depths (docs/deployment.md).",
                       args, nargs, argc, argv);
    if (st >= 0) return st;
    if (!load || !format || !out)
        return cli_usage_error("export", "--load, --format and --out are required");
    char out_real[MTC_PATH_MAX];
    if (!strcmp(format, "gguf") && mtc_outfile_check(out, "--out", out_real, sizeof out_real) !=
                                       MTC_OK) /* one file; safetensors writes a folder */
        return cli_usage_error("export", "%s", mtc_error_detail());
    int gguf = !strcmp(format, "gguf"), onnx = !strcmp(format, "onnx");
    if (!gguf && !onnx && strcmp(format, "safetensors"))
        return cli_usage_error("export", "format=%s is unknown (use safetensors, gguf or onnx)",
                               format);
    const char *half_name = gguf || onnx ? "fp16" : "bf16";
    int half = !strcmp(dtype, half_name);
    if (!gguf && mtc_outdir_check(out, "--out") != MTC_OK) /* a folder, replaced as a whole */
        return cli_usage_error("export", "%s", mtc_error_detail());
    if (!half && strcmp(dtype, "fp32"))
        return cli_usage_error("export", "dtype=%s is not available for %s (use fp32 or %s)", dtype,
                               format, half_name);
    if (shard < 0)
        return cli_usage_error("export", "max-shard-size=%lld must be >= 1", (long long)shard);
    mtc_ckpt_info info;
    if (mtc_ckpt_read_info(load, &info) != MTC_OK)
        return cli_usage_error("export", "%s", mtc_error_detail());
    if (arch && strcmp(arch, "MixtralForCausalLM") && strcmp(arch, "Qwen2MoeForCausalLM") &&
        strcmp(arch, "Qwen3MoeForCausalLM"))
        return cli_usage_error("export",
                               "hf-architecture=%s is not an MoE class mtc knows (use "
                               "MixtralForCausalLM, Qwen2MoeForCausalLM or Qwen3MoeForCausalLM)",
                               arch);
    if (arch && info.cfg.moe.num_experts == 0)
        return cli_usage_error("export", "--hf-architecture is for MoE models; %s is dense", load);
    info.cfg.hidden_dropout = info.cfg.attention_dropout = 0;
    /* the tokenizer saved with the model (BPE ones read their files again) */
    data_tok *tok = NULL;
    if (strcmp(info.tokenizer, "none") && data_tok_deserialize(info.tokenizer, &tok) != MTC_OK)
        return cli_usage_error("export",
                               "%s: cannot load the tokenizer saved with the model: %s (restore "
                               "its files)",
                               load, mtc_error_detail());
    mtc_model *m = NULL;
    gguf_vocab_owned gv = {0};
    mtc_outdir od;
    mtc_result_t rc = mtc_model_init(&info.cfg, 1, 1, NULL, &m);
    if (rc == MTC_OK) rc = mtc_ckpt_load(m, load, &info);
    /* MTP depths serve training only: inference runs the main model, and
     * Hugging Face (DeepseekV3ForCausalLM drops them at load) and llama.cpp's
     * converter leave them out; only the safetensors folder keeps them */
    int mtp = info.cfg.mtp_num_layers;
    if (rc == MTC_OK && mtp > 0 && (gguf || onnx) && (gguf || mtc_onnx_supported(m) == MTC_OK))
        fprintf(stderr,
                "mtc export: note: the %d MTP depth(s) are left out of the %s export (inference "
                "runs the main model; --format safetensors keeps them)\n",
                mtp, format);
    if (rc == MTC_OK && gguf) {
        mtc_gguf_export_opts go = {.f16 = half};
        if (tok && data_tok_kind_of(tok) != DATA_TOK_NULL &&
            (rc = gguf_vocab_build(tok, info.cfg.vocab_size, &gv)) == MTC_OK)
            go.vocab = &gv.v;
        if (rc == MTC_OK) rc = mtc_gguf_export(m, info.tokenizer, out, &go);
    } else if (rc == MTC_OK && (rc = mtc_outdir_begin(&od, out, "--out")) == MTC_OK) {
        /* every file into the temporary sibling od.tmp, then one rename */
        mtc_hf_config_opts co = {.arch = arch, .bos = -1, .eos = -1};
        if (tok && data_tok_kind_of(tok) != DATA_TOK_NULL) { /* eod is GPT-2's bos and eos */
            int eod = data_tok_eod(tok);
            co.ids_set = 1, co.bos = co.eos = eod < info.cfg.vocab_size ? eod : -1;
        }
        mtc_hf_export_opts ho = {.bf16 = half, .max_shard_bytes = shard, .config = co};
        /* mtc_tokenizer.txt names the folder's own tokenizer files, no path */
        char form[MTC_CKPT_TOKENIZER_MAX];
        rc = mtc_ckpt_tok_export_form(info.tokenizer, form, sizeof form);
        if (rc == MTC_OK && onnx) {
            m->cfg.mtp_num_layers = 0; /* the main model's graph and config.json */
            rc = onnx_folder(m, od.tmp, half, shard, &co);
            m->cfg.mtp_num_layers = mtp;
        } else if (rc == MTC_OK) {
            rc = mtc_hf_export(m, form, od.tmp, &ho);
        }
        if (rc == MTC_OK) /* tokenizer.model (tiktoken.json) as it is, beside tokenizer.json */
            rc = mtc_ckpt_tok_copy_model(info.tokenizer, od.tmp);
        if (rc == MTC_OK && tok) {
            mtc_result_t trc = data_tok_write_hf(tok, od.tmp, info.cfg.max_position_embeddings);
            if (trc == MTC_ERR_UNSUPPORTED)
                fprintf(stderr, "mtc export: note: %s\n", mtc_error_detail());
            else
                rc = trc;
        }
        if (rc == MTC_OK)
            rc = mtc_outdir_commit(&od);
        else
            mtc_outdir_abort(&od);
    }
    gguf_vocab_free(&gv);
    data_tok_free(tok);
    mtc_model_free(m);
    if (rc == MTC_ERR_FORMAT || rc == MTC_ERR_UNSUPPORTED || rc == MTC_ERR_INVALID_ARGUMENT)
        return cli_usage_error("export", "%s", mtc_error_detail());
    if (rc != MTC_OK) return cli_fail("export", rc);
    printf("exported %s (iteration %lld) to %s\n", load, (long long)info.iteration, out);
    return 0;
}

int cli_cmd_import(int argc, char **argv) {
    const char *load = NULL, *save = NULL, *format = "safetensors";
    int seq = 0, divisible = 128;
    mtc_arg args[] = {
        {"load", NULL, MTC_ARG_STRING, &load, "DIR",
         "Hugging Face folder: config.json + model.safetensors (or its index) (required)", 0},
        {"save", NULL, MTC_ARG_STRING, &save, "DIR",
         "the mtc checkpoint directory to write (required)", 0},
        {"format", NULL, MTC_ARG_STRING, &format, "F", "safetensors (default)", 0},
        {"seq-length", NULL, MTC_ARG_INT, &seq, "N",
         "context the checkpoint records (default min(max positions, 1024))", 0},
        {"make-vocab-size-divisible-by", NULL, MTC_ARG_INT, &divisible, "N",
         "pad the vocabulary to a multiple (default 128)", 0},
    };
    int nargs = (int)(sizeof args / sizeof args[0]);
    int st =
        cli_parse("import", "--load HF_DIR --save DIR [options]",
                  "Build an mtc checkpoint (iteration 0, no optimizer state) from a Hugging "
                  "Face GPT-2, Llama, Qwen3, Mixtral, Qwen2-MoE, Qwen3-MoE or DeepSeek-V3 "
                  "folder (its MTP layers too when the folder has them); `mtc train --load DIR` "
                  "then trains it in any layout.",
                  args, nargs, argc, argv);
    if (st >= 0) return st;
    if (!load || !save) return cli_usage_error("import", "--load and --save are required");
    if (strcmp(format, "safetensors"))
        return cli_usage_error("import", "format=%s is unknown (use safetensors)", format);
    if (seq < 0) return cli_usage_error("import", "seq-length=%d must be >= 1", seq);
    if (divisible < 1 || divisible > MTC_MODEL_MAX_VOCAB_DIVISOR)
        return cli_usage_error("import", "make-vocab-size-divisible-by=%d is outside [1, %d]",
                               divisible, MTC_MODEL_MAX_VOCAB_DIVISOR);
    mtc_model *m = NULL;
    char tok[MTC_CKPT_TOKENIZER_MAX];
    mtc_result_t rc = mtc_hf_import(load, seq, divisible, &m, tok);
    data_tok *t = NULL; /* the folder's tokenizer, copied into the checkpoint when mtc reads it */
    if (rc == MTC_OK && strcmp(tok, "none") && data_tok_deserialize(tok, &t) != MTC_OK) {
        fprintf(stderr, "mtc import: note: %s: its tokenizer is not imported: %s\n", load,
                mtc_error_detail());
        snprintf(tok, sizeof tok, "none");
    }
    data_tok_free(t);
    if (rc == MTC_OK) rc = mtc_ckpt_dist_save_model(m, save, tok);
    int L = m ? m->cfg.num_layers : 0;
    mtc_model_free(m);
    if (rc == MTC_ERR_FORMAT || rc == MTC_ERR_UNSUPPORTED || rc == MTC_ERR_INVALID_ARGUMENT ||
        rc == MTC_ERR_IO)
        return cli_usage_error("import", "%s", mtc_error_detail());
    if (rc != MTC_OK) return cli_fail("import", rc);
    printf("imported %s (%d layers) into %s/iter_0000000\n", load, L, save);
    return 0;
}
