/* tests/fuzz/replay.c - main() for the fuzz targets without libFuzzer:
 * feeds every file under each argument (a file or a folder, recursively,
 * in name order) to LLVMFuzzerTestOneInput once. A ctest test per target
 * replays its seed corpus and the regression inputs of the crashes fixed
 * so far; a crash, sanitizer report or hang there fails the test.
 * MTC_FUZZ_VERBOSE=1 prints each input's last error detail (a seed the
 * reader refuses covers little). Exit status 1 also when an argument
 * names nothing or holds no input, so a corpus that went missing is a
 * failure, not a pass. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/result.h"
#include "fuzz.h"

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) return -1;
    /* a copy of exactly n bytes, so ASan sees reads past the input's end */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    mtc_error_clear();
    LLVMFuzzerTestOneInput(exact, n);
    if (getenv("MTC_FUZZ_VERBOSE")) /* how far the input got: the last error */
        printf("%s: %s\n", path, mtc_error_detail()[0] ? mtc_error_detail() : "(no error)");
    free(exact);
    return 1;
}

static int run_path(const char *path) {
    struct stat st;
    if (stat(path, &st)) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return run_file(path);
    DIR *d = opendir(path);
    if (!d) return -1;
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    int total = 0;
    for (size_t i = 0; i < n; i++) {
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, names[i]);
        int k = run_path(sub);
        if (k < 0) total = -1;
        if (total >= 0) total += k;
        free(names[i]);
    }
    free(names);
    return total;
}

int main(int argc, char **argv) {
    int status = 0;
    for (int i = 1; i < argc; i++) {
        char abs[4096];
        int k = realpath(argv[i], abs) ? run_path(abs) : -1;
        if (k <= 0) {
            fprintf(stderr, "replay: %s holds no input\n", argv[i]);
            status = 1;
        } else
            printf("replay: %s: %d inputs\n", argv[i], k);
    }
    return status;
}
