/* tests/fuzz/fuzz.h - what the fuzz targets share.
 *
 * Each fuzz_<name>.c defines LLVMFuzzerTestOneInput: libFuzzer calls it
 * with mutated inputs (`make fuzz`, clang only), and replay.c's main()
 * calls it with every committed seed and regression input (a normal ctest
 * test, any compiler). The readers under test take paths, so a target
 * writes its input into files of a private temporary folder first.
 * An input that stands for several files is cut at FUZZ_SEP (the seeds
 * hold it; mutations may drop it, and the missing files are then empty). */
#ifndef MTC_TESTS_FUZZ_H
#define MTC_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#define FUZZ_SEP "\n--8<--\n"
#define FUZZ_MAX_PARTS 4

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The process's private folder (created on first use, removed at exit). */
const char *fuzz_dir(void);
/* Writes n bytes to fuzz_dir()/name (folders in name are created) and puts
 * the full path in path (cap bytes). Aborts when the write fails: that is
 * the harness's fault, not the reader's. */
void fuzz_write(const char *name, const void *data, size_t n, char *path, size_t cap);
/* Empties fuzz_dir() (between inputs, so no file outlives its input). */
void fuzz_clean(void);

/* Cuts data at FUZZ_SEP into at most nparts parts (the last takes the
 * rest); returns how many were found, parts not found are empty. */
typedef struct {
    const uint8_t *p;
    size_t n;
} fuzz_part;
int fuzz_split(const uint8_t *data, size_t size, fuzz_part *parts, int nparts);

#endif
