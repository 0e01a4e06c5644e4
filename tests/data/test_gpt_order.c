/* tests/data/test_gpt_order.c - Megatron datasets give Megatron's samples:
 * for the small datasets tests/data/megatron/gpt_a and gpt_b, one dataset
 * and blends, several --split, seeds, sequence lengths and requested
 * sizes (one epoch, several epochs with a separate final epoch), the number
 * of samples per split and the tokens of each sample equal those of
 * tests/reference/gpt_dataset_reference.py, a plain-Python rendering of
 * Megatron's GPTDataset / BlendedDataset with numpy's RandomState (checked
 * there against numpy itself); its output is tests/data/megatron/gpt_order.txt.
 * Also: numpy's shuffle of 0..9 for seed 1234, as numpy prints it. */
#include <stdlib.h>
#include <string.h>

#include "data/data.h"
#include "data/gpt_dataset.h"
#include "test.h"

int main(void) {
    uint64_t perm[10];
    data_gpt_numpy_shuffle(1234, 10, perm);
    /* numpy.random.RandomState(1234).permutation(10) */
    static const uint64_t want_perm[10] = {7, 2, 9, 1, 0, 8, 4, 5, 6, 3};
    T_CHECKF(!memcmp(perm, want_perm, sizeof perm), "%llu %llu %llu ...",
             (unsigned long long)perm[0], (unsigned long long)perm[1], (unsigned long long)perm[2]);

    FILE *f = fopen("tests/data/megatron/gpt_order.txt", "r");
    T_CHECK(f != NULL);
    if (!f) return T_DONE();
    static char line[65536];
    char name[64] = "", split[64] = "", words[8][256];
    const char *blend[8];
    int n_words = 0, T = 0, cases = 0, samples = 0;
    unsigned long long seed = 0, want[3] = {0}, size[3] = {0};
    data_source *src = NULL;
    int *tok = NULL;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "case ", 5)) {
            sscanf(line + 5, "%63s", name);
        } else if (!strncmp(line, "data ", 5)) {
            n_words = 0;
            for (char *w = strtok(line + 5, " \n"); w && n_words < 8; w = strtok(NULL, " \n")) {
                if (strchr(w, '_')) /* a prefix */
                    snprintf(words[n_words], sizeof words[n_words], "tests/data/megatron/%s", w);
                else
                    snprintf(words[n_words], sizeof words[n_words], "%s", w);
                blend[n_words] = words[n_words];
                n_words++;
            }
        } else if (!strncmp(line, "config ", 7)) {
            T_CHECK(sscanf(line + 7, "%63s %llu %d %llu %llu %llu", split, &seed, &T, &want[0],
                           &want[1], &want[2]) == 6);
        } else if (!strncmp(line, "size ", 5)) {
            T_CHECK(sscanf(line + 5, "%llu %llu %llu", &size[0], &size[1], &size[2]) == 3);
            data_source_opts o = {.data_path = n_words == 1 ? blend[0] : NULL,
                                  .blend = n_words > 1 ? blend : NULL,
                                  .n_blend = n_words > 1 ? n_words : 0,
                                  .num_samples = {want[0], want[1], want[2]},
                                  .seq_length = T,
                                  .seed = seed,
                                  .split = split};
            data_source_free(src);
            src = NULL;
            T_CHECKF(data_source_open(&o, &src) == MTC_OK, "%s: %s", name, mtc_error_detail());
            for (int s = 0; src && s < 3; s++)
                T_CHECKF(data_source_split_size(src, (data_split)s) == size[s],
                         "%s split %d: %llu samples, Megatron %llu", name, s,
                         (unsigned long long)data_source_split_size(src, (data_split)s), size[s]);
            free(tok);
            tok = malloc(sizeof(int) * (size_t)(T + 1));
            cases++;
        } else if (!strncmp(line, "sample ", 7) && src) {
            int s, off;
            unsigned long long k;
            char *p = line + 7;
            T_CHECK(sscanf(p, "%d %llu%n", &s, &k, &off) == 2);
            p += off;
            T_CHECK(data_source_sample(src, (data_split)s, k, tok) == MTC_OK);
            int same = 1;
            for (int j = 0; j <= T; j++) {
                long v = strtol(p, &p, 10);
                same &= tok[j] == v;
            }
            T_CHECKF(same, "%s split %d sample %llu: first tokens mtc %d %d %d", name, s, k, tok[0],
                     tok[1], tok[2]);
            samples++;
        }
    }
    fclose(f);
    data_source_free(src);
    free(tok);
    T_CHECKF(cases == 4 && samples > 200, "%d cases, %d samples", cases, samples);
    printf("%d cases, %d samples equal to Megatron's order\n", cases, samples);
    return T_DONE();
}
