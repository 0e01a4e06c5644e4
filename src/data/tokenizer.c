/* data/tokenizer.c - byte-level and char-level tokenizers.
 *
 * byte: id = byte value, vocabulary 256.
 * char: id = rank of the byte among the distinct bytes of a corpus (sorted
 *       ascending), vocabulary = number of distinct bytes. "Char" means a
 *       byte: UTF-8 text is tokenized one byte at a time, never split into
 *       code points, so every corpus round-trips exactly.
 * Serialized forms: "byte" and "char:<two hex digits per char>". Does no
 * file I/O. */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "data/data.h"

int data_tokenizer_parse(const char *name) {
    if (!name) return -1;
    if (!strcasecmp(name, "byte") || !strcasecmp(name, "ByteLevelTokenizer"))
        return DATA_TOKENIZER_BYTE;
    if (!strcasecmp(name, "char") || !strcasecmp(name, "CharLevelTokenizer"))
        return DATA_TOKENIZER_CHAR;
    return -1;
}

void data_tokenizer_init_byte(data_tokenizer *tok) {
    memset(tok, 0, sizeof *tok);
    tok->kind = DATA_TOKENIZER_BYTE;
    tok->vocab_size = 256;
    for (int i = 0; i < 256; i++)
        tok->chars[i] = (unsigned char)i, tok->id_of[i] = i;
}

void data_tokenizer_init_char(data_tokenizer *tok, const unsigned char *text, size_t n) {
    unsigned char seen[256] = {0};
    for (size_t i = 0; i < n; i++)
        seen[text[i]] = 1;
    memset(tok, 0, sizeof *tok);
    tok->kind = DATA_TOKENIZER_CHAR;
    for (int c = 0; c < 256; c++) {
        tok->id_of[c] = -1;
        if (seen[c]) {
            tok->id_of[c] = tok->vocab_size;
            tok->chars[tok->vocab_size++] = (unsigned char)c;
        }
    }
}

size_t data_tokenizer_encode(const data_tokenizer *tok, const unsigned char *text, size_t n,
                             int *ids) {
    size_t unknown = 0;
    for (size_t i = 0; i < n; i++) {
        int id = tok->id_of[text[i]];
        if (id < 0) id = 0, unknown++;
        ids[i] = id;
    }
    return unknown;
}

size_t data_tokenizer_decode(const data_tokenizer *tok, const int *ids, size_t n, char *out,
                             size_t cap) {
    if (cap == 0) return 0;
    size_t w = 0;
    for (size_t i = 0; i < n && w + 1 < cap; i++) {
        int id = ids[i];
        /* ids the vocabulary does not have (a model may emit them) print as '?' */
        out[w++] = (id >= 0 && id < tok->vocab_size) ? (char)tok->chars[id] : '?';
    }
    out[w] = '\0';
    return w;
}

mtc_result_t data_tokenizer_serialize(const data_tokenizer *tok, char *out, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    size_t need = tok->kind == DATA_TOKENIZER_BYTE ? 5 : 5 + 2 * (size_t)tok->vocab_size + 1;
    if (cap < need)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "tokenizer text needs %zu bytes, buffer has %zu",
                         need, cap);
    if (tok->kind == DATA_TOKENIZER_BYTE) {
        memcpy(out, "byte", 5);
        return MTC_OK;
    }
    memcpy(out, "char:", 5);
    size_t w = 5;
    for (int i = 0; i < tok->vocab_size; i++) {
        out[w++] = hex[tok->chars[i] >> 4];
        out[w++] = hex[tok->chars[i] & 15];
    }
    out[w] = '\0';
    return MTC_OK;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

mtc_result_t data_tokenizer_deserialize(data_tokenizer *tok, const char *s) {
    if (!strcmp(s, "byte")) {
        data_tokenizer_init_byte(tok);
        return MTC_OK;
    }
    if (strncmp(s, "char:", 5) != 0)
        return mtc_error(MTC_ERR_FORMAT,
                         "tokenizer \"%.40s\" is neither \"byte\" nor \"char:<hex>\"", s);
    const char *h = s + 5;
    size_t n = strlen(h);
    if (n % 2 != 0 || n / 2 > 256 || n == 0)
        return mtc_error(MTC_ERR_FORMAT,
                         "tokenizer \"char:...\" needs 2 to 512 hex digits in pairs, got %zu", n);
    unsigned char chars[256];
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval((unsigned char)h[2 * i]), lo = hexval((unsigned char)h[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return mtc_error(MTC_ERR_FORMAT, "tokenizer \"char:...\": bad hex digit at %zu", 2 * i);
        chars[i] = (unsigned char)(hi * 16 + lo);
        if (i > 0 && chars[i] <= chars[i - 1])
            return mtc_error(MTC_ERR_FORMAT,
                             "tokenizer \"char:...\": chars must be strictly ascending (entry %zu)",
                             i);
    }
    data_tokenizer_init_char(tok, chars, n / 2);
    return MTC_OK;
}
