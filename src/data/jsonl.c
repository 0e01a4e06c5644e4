/* data/jsonl.c - see jsonl.h. A recursive-descent checker (depth bounded,
 * so a line of a million '[' cannot overflow the stack) and span walkers
 * that rely on the check having passed. */
#include "data/jsonl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSONL_MAX_DEPTH 512

typedef struct {
    const unsigned char *s;
    size_t n, i;
    char why[96];
} jp;

static int fail(jp *p, const char *why) {
    if (!p->why[0]) snprintf(p->why, sizeof p->why, "%s", why);
    return 0;
}

static void ws(jp *p) {
    while (p->i < p->n &&
           (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

/* One UTF-8 sequence at p->i (RFC 3629: no overlongs, no surrogates, <= U+10FFFF). */
static int utf8(jp *p) {
    const unsigned char *c = p->s + p->i;
    size_t left = p->n - p->i;
    unsigned char b = c[0];
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (!len || (size_t)len > left) return fail(p, "invalid UTF-8");
    uint32_t cp = len == 1 ? b : len == 2 ? b & 0x1f : len == 3 ? b & 0x0f : b & 0x07;
    for (int k = 1; k < len; k++) {
        if ((c[k] & 0xc0) != 0x80) return fail(p, "invalid UTF-8");
        cp = cp << 6 | (c[k] & 0x3f);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return fail(p, "invalid UTF-8");
    p->i += (size_t)len;
    return 1;
}

static int hex4(const unsigned char *c, unsigned *v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned d = c[k] >= '0' && c[k] <= '9'   ? c[k] - '0'
                     : c[k] >= 'a' && c[k] <= 'f' ? c[k] - 'a' + 10
                     : c[k] >= 'A' && c[k] <= 'F' ? c[k] - 'A' + 10
                                                  : 16;
        if (d > 15) return 0;
        *v = *v << 4 | d;
    }
    return 1;
}

static int string(jp *p) {
    p->i++; /* the opening quote */
    while (p->i < p->n) {
        unsigned char c = p->s[p->i];
        if (c == '"') {
            p->i++;
            return 1;
        }
        if (c < 0x20) return fail(p, "a raw control character in a string (escape it)");
        if (c != '\\') {
            if (!utf8(p)) return 0;
            continue;
        }
        if (p->i + 1 >= p->n) break;
        c = p->s[p->i + 1];
        if (strchr("\"\\/bfnrt", c) && c) {
            p->i += 2;
            continue;
        }
        unsigned u, lo;
        if (c != 'u' || p->i + 6 > p->n || !hex4(p->s + p->i + 2, &u))
            return fail(p, "an invalid escape in a string");
        p->i += 6;
        if (u >= 0xdc00 && u <= 0xdfff) return fail(p, "a lone surrogate escape (\\udc00-\\udfff)");
        if (u >= 0xd800 && u <= 0xdbff) {
            if (p->i + 6 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' ||
                !hex4(p->s + p->i + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
                return fail(p, "a lone surrogate escape (\\ud800-\\udbff without its pair)");
            p->i += 6;
        }
    }
    return fail(p, "an unterminated string");
}

static int lit(jp *p, const char *w) {
    size_t k = strlen(w);
    if (p->n - p->i < k || memcmp(p->s + p->i, w, k)) return 0;
    p->i += k;
    return 1;
}

static int digits(jp *p) {
    size_t i0 = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
        p->i++;
    return p->i > i0;
}

static int number(jp *p) {
    if (p->s[p->i] == '-') {
        p->i++;
        if (lit(p, "Infinity")) return 1;
    }
    if (p->i < p->n && p->s[p->i] == '0')
        p->i++;
    else if (!digits(p))
        return fail(p, "not a JSON value");
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (!digits(p)) return fail(p, "a number without digits after '.'");
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (!digits(p)) return fail(p, "a number without exponent digits");
    }
    return 1;
}

static int value(jp *p, int depth);

static int members(jp *p, int depth, char close) {
    p->i++;
    ws(p);
    if (p->i < p->n && p->s[p->i] == (unsigned char)close) {
        p->i++;
        return 1;
    }
    for (;;) {
        if (close == '}') {
            if (p->i >= p->n || p->s[p->i] != '"') return fail(p, "an object key is not a string");
            if (!string(p)) return 0;
            ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') return fail(p, "':' expected after a key");
            p->i++;
        }
        if (!value(p, depth + 1)) return 0;
        ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            ws(p);
            continue;
        }
        if (p->i < p->n && p->s[p->i] == (unsigned char)close) {
            p->i++;
            return 1;
        }
        return fail(p, close == '}' ? "',' or '}' expected" : "',' or ']' expected");
    }
}

static int value(jp *p, int depth) {
    if (depth > JSONL_MAX_DEPTH) return fail(p, "nested deeper than 512 levels");
    ws(p);
    if (p->i >= p->n) return fail(p, "a value is missing");
    unsigned char c = p->s[p->i];
    if (c == '{') return members(p, depth, '}');
    if (c == '[') return members(p, depth, ']');
    if (c == '"') return string(p);
    if (lit(p, "true") || lit(p, "false") || lit(p, "null") || lit(p, "NaN") || lit(p, "Infinity"))
        return 1;
    if (c == '-' || (c >= '0' && c <= '9')) return number(p);
    return fail(p, "not a JSON value");
}

mtc_result_t data_jsonl_check(const char *s, size_t n) {
    jp p = {(const unsigned char *)s, n, 0, ""};
    int ok = value(&p, 0);
    if (ok) {
        ws(&p);
        if (p.i < p.n)
            ok = fail(&p, p.s[p.i] == '{' || p.s[p.i] == '['
                              ? "a second JSON value after the first (one value per line)"
                              : "extra data after the JSON value");
    }
    if (ok) return MTC_OK;
    return mtc_error(MTC_ERR_INVALID_ARGUMENT, "column %zu: %s", p.i + 1, p.why);
}

/* ---- walking a checked line ----------------------------------------------------- */

/* The end of the value starting at s[i] (checked input). */
static size_t skip(const char *s, size_t n, size_t i) {
    if (s[i] == '"') {
        for (i++; i < n && s[i] != '"'; i++)
            if (s[i] == '\\') i++;
        return i + 1;
    }
    if (s[i] == '{' || s[i] == '[') {
        int depth = 0;
        for (; i < n; i++) {
            char c = s[i];
            if (c == '"') {
                i = skip(s, n, i) - 1;
            } else if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                if (--depth == 0) return i + 1;
            }
        }
        return n;
    }
    while (i < n && !strchr(" \t\r\n,]}", s[i]))
        i++;
    return i;
}

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

data_jspan data_jsonl_value(const char *s, size_t n) {
    size_t i = skip_ws(s, n, 0);
    return (data_jspan){s + i, skip(s, n, i) - i};
}

char data_jsonl_kind(data_jspan v) {
    char c = v.n ? v.p[0] : 'z';
    return c == '{'   ? 'o'
           : c == '[' ? 'a'
           : c == '"' ? 's'
           : c == 't' ? 't'
           : c == 'f' ? 'f'
           : c == 'n' ? 'z'
                      : 'n';
}

int data_jsonl_next(data_jspan v, size_t *pos, data_jspan *out) {
    size_t i = *pos ? *pos : 1, n = v.n - 1; /* inside the brackets */
    i = skip_ws(v.p, n, i);
    if (i < n && v.p[i] == ',') i = skip_ws(v.p, n, i + 1);
    if (i >= n) return 0;
    size_t e = skip(v.p, n, i);
    *out = (data_jspan){v.p + i, e - i};
    *pos = e;
    return 1;
}

int data_jsonl_member(data_jspan v, const char *key, data_jspan *out) {
    size_t i = 1, n = v.n - 1, klen = strlen(key);
    int found = 0;
    for (;;) {
        i = skip_ws(v.p, n, i);
        if (i < n && v.p[i] == ',') i = skip_ws(v.p, n, i + 1);
        if (i >= n) return found;
        data_jspan k = {v.p + i, skip(v.p, n, i) - i};
        i = skip_ws(v.p, n, i + k.n) + 1; /* past ':' */
        i = skip_ws(v.p, n, i);
        data_jspan val = {v.p + i, skip(v.p, n, i) - i};
        i += val.n;
        char *kb = NULL;
        size_t kn = 0;
        if (data_jsonl_string(k, &kb, &kn) != MTC_OK) return found;
        if (kn == klen && !memcmp(kb, key, klen)) *out = val, found = 1; /* the last one wins */
        free(kb);
    }
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

mtc_result_t data_jsonl_string(data_jspan v, char **out, size_t *len) {
    /* the decoded text is never longer than the quoted one */
    char *o = malloc(v.n + 1);
    if (!o) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "a string of %zu bytes", v.n);
    size_t k = 0;
    const unsigned char *s = (const unsigned char *)v.p;
    for (size_t i = 1; i + 1 < v.n; i++) {
        if (s[i] != '\\') {
            o[k++] = (char)s[i];
            continue;
        }
        unsigned char c = s[++i];
        if (c != 'u') {
            o[k++] = c == 'b'   ? '\b'
                     : c == 'f' ? '\f'
                     : c == 'n' ? '\n'
                     : c == 'r' ? '\r'
                     : c == 't' ? '\t'
                                : (char)c;
            continue;
        }
        unsigned u = 0, lo = 0;
        hex4(s + i + 1, &u);
        i += 4;
        if (u >= 0xd800 && u <= 0xdbff) {
            hex4(s + i + 3, &lo);
            i += 6;
            u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
        }
        k += put_utf8(o + k, u);
    }
    o[k] = 0;
    *out = o, *len = k;
    return MTC_OK;
}

void data_jsonl_print(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = c == '"'    ? "\\\""
                        : c == '\\' ? "\\\\"
                        : c == '\n' ? "\\n"
                        : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t"
                        : c == '\b' ? "\\b"
                        : c == '\f' ? "\\f"
                                    : NULL;
        if (e)
            fputs(e, f);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}
