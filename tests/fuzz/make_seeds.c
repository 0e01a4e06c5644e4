/* tests/fuzz/make_seeds.c - writes the binary seeds of the fuzz corpus
 * with mtc's own writers, so a seed is a valid file of today's format:
 *   build/tests/make_fuzz_seeds tests/fuzz/corpus
 * It (re)writes OUT/<target>/seed-*: tiny GPT-2 and Llama checkpoints (one
 * file and directory forms), their safetensors export, an indexed dataset
 * and llm.c shards. The text seeds (tokenizers, configs, command lines) are
 * written by hand and are not touched. Not a test: run it after a format
 * change and commit the result. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "ckpt/hf.h"
#include "ckpt/state.h"
#include "data/data.h"
#include "fuzz.h"

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    if (fread(b, 1, (size_t)len, f) != (size_t)len) exit(1);
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* out/target/name = the files joined by FUZZ_SEP (NULL ends the list) */
static void pack(const char *out, const char *target, const char *name, const char *files[]) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", out, target, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    for (int i = 0; files[i]; i++) {
        size_t n;
        unsigned char *b = slurp(files[i], &n);
        if (i) fputs(FUZZ_SEP, f);
        fwrite(b, 1, n, f);
        free(b);
    }
    fclose(f);
    printf("%s\n", path);
}

static mtc_model *tiny(int llama) {
    mtc_model_config c = {.num_layers = 1,
                          .hidden_size = 8,
                          .num_heads = 2,
                          .ffn_hidden_size = llama ? 12 : 16,
                          .seq_length = 4,
                          .max_position_embeddings = 4,
                          .vocab_size = 10,
                          .padded_vocab_size = 16,
                          .init_std = 0.2f};
    if (llama) {
        c.normalization = MTC_NORM_RMSNORM, c.position_embedding = MTC_POS_ROPE;
        c.swiglu = 1, c.num_query_groups = 1, c.untie_embeddings = 1, c.disable_bias_linear = 1;
        c.norm_epsilon = 1e-6f, c.rotary_base = 10000;
    }
    mtc_model *m = NULL;
    if (mtc_model_init(&c, 1, 1, NULL, &m) != MTC_OK) exit(1);
    mtc_model_init_params(m, 7);
    return m;
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        if ((call) != MTC_OK) {                                                                    \
            fprintf(stderr, "%s: %s\n", #call, mtc_error_detail());                                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_fuzz_seeds CORPUS_DIR\n");
        return 2;
    }
    const char *out = argv[1];
    const char *d = fuzz_dir();
    char a[2048], b[4096], c[4096];
    for (int llama = 0; llama < 2; llama++) {
        const char *fam = llama ? "llama" : "gpt2";
        char name[64];
        mtc_model *m = tiny(llama);
        const char *tok = llama ? "null:10" : "byte";
        snprintf(a, sizeof a, "%s/%s.bin", d, fam);
        OK(mtc_ckpt_save(m, a, 3, tok));
        snprintf(name, sizeof name, "seed-%s", fam);
        pack(out, "ckpt", name, (const char *[]){a, NULL});

        snprintf(a, sizeof a, "%s/%s.dist", d, fam);
        OK(mtc_ckpt_dist_save_model(m, a, tok));
        snprintf(b, sizeof b, "%s/iter_0000000/metadata.json", a);
        snprintf(c, sizeof c, "%s/iter_0000000/__0.distcp", a);
        char tracker[4096];
        snprintf(tracker, sizeof tracker, "%s/%s.tracker", d, fam);
        FILE *f = fopen(tracker, "w");
        fputs("0\n", f);
        fclose(f);
        pack(out, "ckpt_dist", name, (const char *[]){b, c, tracker, NULL});

        snprintf(a, sizeof a, "%s/%s.hf", d, fam);
        mtc_hf_export_opts o = {.bf16 = llama};
        OK(mtc_hf_export(m, tok, a, &o));
        snprintf(b, sizeof b, "%s/config.json", a);
        snprintf(c, sizeof c, "%s/model.safetensors", a);
        char t[4096];
        snprintf(t, sizeof t, "%s/mtc_tokenizer.txt", a);
        pack(out, "hf", name, (const char *[]){b, c, t, NULL});
        mtc_model_free(m);
    }

    /* an indexed dataset: 3 documents, uint16 and int32, with a tokenizer */
    int tokens[24];
    for (int i = 0; i < 24; i++)
        tokens[i] = (i * 7) % 11;
    int lens[3] = {5, 11, 8};
    const int codes[2] = {8, 4};
    for (int k = 0; k < 2; k++) {
        char prefix[1024], name[64];
        snprintf(prefix, sizeof prefix, "%s/ds%d", d, codes[k]);
        OK(data_indexed_write(prefix, tokens, lens, 3, codes[k]));
        snprintf(a, sizeof a, "%s.idx", prefix);
        snprintf(b, sizeof b, "%s.bin", prefix);
        snprintf(c, sizeof c, "%s.tok", prefix);
        FILE *f = fopen(c, "w");
        fputs("byte", f);
        fclose(f);
        snprintf(name, sizeof name, "seed-dtype%d", codes[k]);
        pack(out, "indexed", name, (const char *[]){a, b, k ? c : NULL, NULL});
    }

    /* llm.c shards: GPT-2 (uint16) and Llama-3 (uint32) */
    for (int k = 0; k < 2; k++) {
        int32_t hdr[256] = {0};
        hdr[0] = k ? 20240801 : 20240520, hdr[1] = k ? 7 : 1, hdr[2] = 20;
        snprintf(a, sizeof a, "%s/shard%d.bin", d, k);
        FILE *f = fopen(a, "wb");
        fwrite(hdr, sizeof hdr, 1, f);
        for (int i = 0; i < 20; i++) {
            uint32_t v = (uint32_t)(i * 5 % 13);
            fwrite(&v, k ? 4 : 2, 1, f);
        }
        fclose(f);
        char name[64];
        snprintf(name, sizeof name, "seed-%s", k ? "llama3" : "gpt2");
        pack(out, "llmc", name, (const char *[]){a, NULL});
    }
    return 0;
}
