/* core/args.c - the declarative parser of args.h. */
#include "core/args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int mtc_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 99;
    int d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

static mtc_arg *args_find(mtc_arg *args, int nargs, const char *name, size_t len) {
    for (int i = 0; i < nargs; i++) {
        if (strlen(args[i].name) == len && strncmp(args[i].name, name, len) == 0) return &args[i];
        if (args[i].alias && strlen(args[i].alias) == len && strncmp(args[i].alias, name, len) == 0)
            return &args[i];
    }
    return NULL;
}

static const char *args_closest(const mtc_arg *args, int nargs, const char *name) {
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < nargs; i++) {
        int d = mtc_edit_distance(name, args[i].name);
        if (d < best_d) best_d = d, best = args[i].name;
        /* a prefix or substring match is a good suggestion too */
        if (strstr(args[i].name, name) && (int)strlen(name) >= 3 && best_d > 2)
            best_d = 2, best = args[i].name;
    }
    int limit = (int)strlen(name) / 2 + 2;
    return best_d <= limit ? best : NULL;
}

static int parse_i64(const char *s, int64_t *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) {
        /* accept 1e6-style integers and k/M/G suffixes, common in bucket sizes */
        double d = strtod(s, &end);
        if (*end == 'k' || *end == 'K')
            d *= 1e3, end++;
        else if (*end == 'M')
            d *= 1e6, end++;
        else if (*end == 'G')
            d *= 1e9, end++;
        /* range first: converting a double outside long long is undefined */
        if (*end || !(d >= -9223372036854775808.0 && d < 9223372036854775808.0) ||
            d != (double)(long long)d)
            return -1;
        v = (long long)d;
    }
    *out = v;
    return 0;
}

static int parse_ints(const char *s, mtc_arg_ints *dst, int append) {
    if (!append) dst->n = 0;
    const char *p = s;
    while (*p) {
        char tok[64];
        size_t n = 0;
        while (*p && *p != ',' && n < sizeof tok - 1)
            tok[n++] = *p++;
        tok[n] = '\0';
        if (*p == ',') p++;
        if (n == 0) continue;
        int64_t v;
        if (parse_i64(tok, &v) || dst->n >= MTC_ARG_INTS_MAX) return -1;
        dst->v[dst->n++] = v;
    }
    return 0;
}

mtc_result_t mtc_args_parse(mtc_arg *args, int nargs, int argc, char **argv,
                            const char **positional, int max_positional, int *npositional,
                            char *err, size_t errlen) {
    if (npositional) *npositional = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || a[1] != '-' || a[2] == '\0') {
            if (positional && npositional && *npositional < max_positional) {
                positional[(*npositional)++] = a;
                continue;
            }
            snprintf(err, errlen, "unexpected argument '%s' (options start with --; see --help)",
                     a);
            return MTC_ERR_INVALID_ARGUMENT;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        mtc_arg *opt = args_find(args, nargs, name, len);
        int negate = 0;
        if (!opt && len > 3 && strncmp(name, "no-", 3) == 0) {
            opt = args_find(args, nargs, name + 3, len - 3);
            if (opt && opt->type == MTC_ARG_FLAG)
                negate = 1;
            else
                opt = NULL;
        }
        if (!opt) {
            char buf[128];
            snprintf(buf, sizeof buf, "%.*s", (int)(len < 100 ? len : 100), name);
            const char *sug = args_closest(args, nargs, buf);
            if (sug)
                snprintf(err, errlen, "unknown option --%s (did you mean --%s?)", buf, sug);
            else
                snprintf(err, errlen, "unknown option --%s (see --help for the list)", buf);
            return MTC_ERR_INVALID_ARGUMENT;
        }
        opt->seen = 1;
        if (opt->type == MTC_ARG_FLAG) {
            if (eq) {
                const char *v = eq + 1;
                if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes"))
                    *(int *)opt->dest = !negate;
                else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no"))
                    *(int *)opt->dest = negate;
                else {
                    snprintf(err, errlen, "--%s takes no value or true/false, got '%s'", opt->name,
                             v);
                    return MTC_ERR_INVALID_ARGUMENT;
                }
            } else {
                *(int *)opt->dest = !negate;
            }
            continue;
        }
        const char *val = eq ? eq + 1 : NULL;
        if (!val) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--%s needs a value (%s)", opt->name,
                         opt->metavar ? opt->metavar : "see --help");
                return MTC_ERR_INVALID_ARGUMENT;
            }
            val = argv[++i];
        }
        int64_t iv;
        switch (opt->type) {
        case MTC_ARG_INT:
            if (parse_i64(val, &iv) || iv < -2147483647LL || iv > 2147483647LL) {
                snprintf(err, errlen, "--%s expects an integer, got '%s'", opt->name, val);
                return MTC_ERR_INVALID_ARGUMENT;
            }
            *(int *)opt->dest = (int)iv;
            break;
        case MTC_ARG_I64:
            if (parse_i64(val, &iv)) {
                snprintf(err, errlen, "--%s expects an integer, got '%s'", opt->name, val);
                return MTC_ERR_INVALID_ARGUMENT;
            }
            *(int64_t *)opt->dest = iv;
            break;
        case MTC_ARG_DOUBLE: {
            char *end;
            errno = 0;
            double d = strtod(val, &end);
            if (errno || *end || end == val) {
                snprintf(err, errlen, "--%s expects a number, got '%s'", opt->name, val);
                return MTC_ERR_INVALID_ARGUMENT;
            }
            *(double *)opt->dest = d;
            break;
        }
        case MTC_ARG_STRING: *(const char **)opt->dest = val; break;
        case MTC_ARG_INTS: {
            mtc_arg_ints *dst = opt->dest;
            if (parse_ints(val, dst, 0)) {
                snprintf(err, errlen, "--%s expects integers like 1,2,3, got '%s'", opt->name, val);
                return MTC_ERR_INVALID_ARGUMENT;
            }
            /* Megatron style: "--hierarchical-context-parallel-sizes 2 4" */
            while (!eq && i + 1 < argc && argv[i + 1][0] != '-' &&
                   parse_ints(argv[i + 1], dst, 1) == 0)
                i++;
            break;
        }
        case MTC_ARG_STRINGS: {
            mtc_arg_strings *dst = opt->dest;
            dst->n = 0; /* a repeated flag replaces, as for the other types */
            dst->v[dst->n++] = val;
            while (!eq && i + 1 < argc && argv[i + 1][0] != '-') {
                if (dst->n == MTC_ARG_STRINGS_MAX) {
                    snprintf(err, errlen, "--%s takes at most %d values", opt->name,
                             MTC_ARG_STRINGS_MAX);
                    return MTC_ERR_INVALID_ARGUMENT;
                }
                dst->v[dst->n++] = argv[++i];
            }
            break;
        }
        default: break;
        }
    }
    return MTC_OK;
}

void mtc_args_help(FILE *f, const mtc_arg *args, int nargs) {
    for (int i = 0; i < nargs; i++) {
        char left[128];
        int n = snprintf(left, sizeof left, "  --%s", args[i].name);
        if (args[i].alias)
            n += snprintf(left + n, sizeof left - (size_t)n, ", --%s", args[i].alias);
        if (args[i].type != MTC_ARG_FLAG)
            snprintf(left + n, sizeof left - (size_t)n, " %s",
                     args[i].metavar ? args[i].metavar : "VALUE");
        if (strlen(left) > 40)
            fprintf(f, "%s\n%42s%s\n", left, "", args[i].help ? args[i].help : "");
        else
            fprintf(f, "%-42s%s\n", left, args[i].help ? args[i].help : "");
    }
}

int mtc_args_seen(const mtc_arg *args, int nargs, const char *name) {
    for (int i = 0; i < nargs; i++)
        if (strcmp(args[i].name, name) == 0) return args[i].seen;
    return 0;
}
