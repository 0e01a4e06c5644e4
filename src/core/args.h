/* core/args.h - a small declarative command-line parser shared by every
 * subcommand, so flags behave the same everywhere:
 *   --name value, --name=value, boolean flags (--flag, --no-flag),
 *   aliases (--tp for --tensor-model-parallel-size), lists "1,2,3" or
 *   "1 2 3" (Megatron style: the values that follow until the next --flag),
 *   and an unknown flag answered with the closest known one.
 * Parsing only fills destinations and reports the first problem in `err`
 * as one line; it never prints or exits (cli/ decides). */
#ifndef MTC_CORE_ARGS_H
#define MTC_CORE_ARGS_H

#include <stdint.h>
#include <stdio.h>

#include "core/result.h"

typedef enum {
    MTC_ARG_FLAG,    /* int*: set to 1 (--no-NAME sets 0) */
    MTC_ARG_INT,     /* int* */
    MTC_ARG_I64,     /* int64_t* */
    MTC_ARG_DOUBLE,  /* double* */
    MTC_ARG_STRING,  /* const char**: points into argv */
    MTC_ARG_INTS,    /* mtc_arg_ints*: comma- or space-separated integers */
    MTC_ARG_STRINGS, /* mtc_arg_strings*: the value and the words after it up to the next
                        --flag (Megatron's nargs='*': --data-path 0.3 A 0.7 B) */
} mtc_arg_type_t;

#define MTC_ARG_INTS_MAX 64
typedef struct {
    int n;
    int64_t v[MTC_ARG_INTS_MAX];
} mtc_arg_ints;

#define MTC_ARG_STRINGS_MAX 256
typedef struct {
    int n;
    const char *v[MTC_ARG_STRINGS_MAX]; /* point into argv */
} mtc_arg_strings;

typedef struct {
    const char *name;  /* without dashes: "tensor-model-parallel-size" */
    const char *alias; /* optional: "tp" */
    mtc_arg_type_t type;
    void *dest;
    const char *metavar; /* "N", "PATH" (help only) */
    const char *help;    /* one line; "(default: ...)" is appended by the caller's text */
    int seen;            /* set to 1 when given on the command line */
} mtc_arg;

/* Parse argv[0..argc) (without the program and command names). Positional
 * words are refused unless `positional` is non-NULL, in which case they are
 * collected there (at most max_positional). */
mtc_result_t mtc_args_parse(mtc_arg *args, int nargs, int argc, char **argv,
                            const char **positional, int max_positional, int *npositional,
                            char *err, size_t errlen);

/* Print "  --name, --alias METAVAR   help" lines, aligned. */
void mtc_args_help(FILE *f, const mtc_arg *args, int nargs);

/* Was the option called `name` given? */
int mtc_args_seen(const mtc_arg *args, int nargs, const char *name);

/* Levenshtein distance, for "did you mean" suggestions. */
int mtc_edit_distance(const char *a, const char *b);

#endif
