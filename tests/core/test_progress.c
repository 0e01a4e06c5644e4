/* tests/core/test_progress.c - the phase reporter of core/progress.h on a
 * stream that is not a terminal, with a substituted clock: a phase within
 * its first second prints nothing; a longer one prints its first line past
 * the second, then no more often than every 5 s, then "done"; the off mode
 * (the CLI's MTC_PROGRESS=0) silences it and always prints every phase
 * (tests/train/progress_cli.sh runs the variable); counts read as
 * 124M / 1.5B / 532K / 17. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/progress.h"
#include "test.h"

static uint64_t fake_ns;
static uint64_t fake_now(void) { return fake_ns; }

/* Everything written to f since the last call, as a NUL-terminated string. */
static const char *drain(FILE *f) {
    static char buf[4096];
    fflush(f);
    long n = ftell(f);
    rewind(f);
    size_t got = fread(buf, 1, n > 0 && n < (long)sizeof buf ? (size_t)n : 0, f);
    buf[got] = 0;
    rewind(f);
    if (ftruncate(fileno(f), 0) != 0) buf[0] = 0;
    return buf;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

int main(void) {
    const uint64_t S = 1000000000ull;
    FILE *f = tmpfile();
    T_CHECK(f != NULL);
    if (!f) return T_DONE();
    mtc_progress p;
    mtc_progress_init(&p, f, MTC_PROGRESS_ON);
    p.now = fake_now;
    T_CHECK(!p.tty); /* a file */

    /* a short phase: silent */
    fake_ns = 10 * S;
    mtc_progress_begin(&p, "building %s", "quick");
    fake_ns += S / 2;
    mtc_progress_update(&p, 1, 2);
    fake_ns += S / 4;
    mtc_progress_end(&p);
    T_CHECKF(drain(f)[0] == 0, "a phase of 0.75 s printed something");

    /* a long phase: one line past the first second, then every >= 5 s */
    mtc_progress_begin(&p, "initialising %s parameters", "124M");
    T_CHECK(drain(f)[0] == 0);
    fake_ns += S / 2;
    mtc_progress_update(&p, 10, 100);
    T_CHECK(drain(f)[0] == 0);
    fake_ns += S; /* 1.5 s */
    mtc_progress_update(&p, 20, 100);
    const char *s = drain(f);
    T_CHECKF(!strcmp(s, "> initialising 124M parameters: 20% after 1.5 s\n"), "got '%s'", s);
    int lines = 0;
    for (int i = 0; i < 40; i++) { /* 40 updates over 10 s: two more lines */
        fake_ns += S / 4;
        mtc_progress_update(&p, 20 + 2 * i, 100);
        lines += count_lines(drain(f));
    }
    T_CHECKF(lines == 2, "%d lines in 10 s of updates (want 2: every 5 s)", lines);
    fake_ns += S;
    mtc_progress_end(&p);
    s = drain(f);
    T_CHECKF(!strcmp(s, "> initialising 124M parameters: done in 12.5 s\n"), "got '%s'", s);

    /* a long phase without updates still reports its end */
    mtc_progress_begin(&p, "loading checkpoint X");
    fake_ns += 3 * S;
    mtc_progress_end(&p);
    s = drain(f);
    T_CHECKF(!strcmp(s, "> loading checkpoint X: done in 3.0 s\n"), "got '%s'", s);

    /* off: nothing, even for a long phase; always: every phase */
    mtc_progress_init(&p, f, MTC_PROGRESS_OFF);
    p.now = fake_now;
    mtc_progress_begin(&p, "silent");
    fake_ns += 10 * S;
    mtc_progress_update(&p, 1, 2);
    mtc_progress_end(&p);
    T_CHECK(drain(f)[0] == 0);
    mtc_progress_init(&p, f, MTC_PROGRESS_ALWAYS);
    p.now = fake_now;
    mtc_progress_begin(&p, "building GPT model");
    fake_ns += S / 10;
    mtc_progress_end(&p);
    s = drain(f);
    T_CHECKF(!strcmp(s, "> building GPT model ... (0.0 s)\n> building GPT model: done in 0.1 s\n"),
             "got '%s'", s);
    mtc_progress_init(&p, NULL, MTC_PROGRESS_ON); /* no stream: every call a no-op */
    mtc_progress_begin(&p, "x");
    mtc_progress_update(&p, 1, 1);
    mtc_progress_end(&p);

    char b[16];
    T_CHECK(!strcmp(mtc_progress_count(b, 123886080), "124M"));
    T_CHECK(!strcmp(mtc_progress_count(b, 1.5e9), "1.5B"));
    T_CHECK(!strcmp(mtc_progress_count(b, 532000), "532K"));
    T_CHECK(!strcmp(mtc_progress_count(b, 17), "17"));
    fclose(f);
    return T_DONE();
}
