/* cli/preprocess_text.h - `mtc preprocess --text-documents lines|paragraphs`:
 * plain text in (a file, or every regular non-hidden file of a folder in
 * name order), one document per non-blank line or per paragraph (lines up
 * to a blank line, joined by their newlines). A document never spans two
 * files. Bytes are passed through as they are (the tokenizer decides). */
#ifndef MTC_CLI_PREPROCESS_TEXT_H
#define MTC_CLI_PREPROCESS_TEXT_H

#include <stdio.h>
#include <sys/types.h>

#include "core/result.h"

typedef struct {
    int paragraphs;   /* 0: a line per document */
    char **files;     /* the input files, in order */
    int nfiles, next; /* next file to open */
    FILE *f;          /* the open one (NULL between files) */
    const char *path; /* its name, for messages */
    size_t line_no;   /* lines read from it */
    size_t doc_line;  /* the line the last document started on */
    char *buf;        /* getline's */
    size_t cap;
} pre_text_reader;

/* mode: "lines" or "paragraphs"; input: a file or a folder. One-line
 * INVALID_ARGUMENT naming the value (an unknown mode, an unreadable input,
 * a folder with no file). */
mtc_result_t pre_text_open(pre_text_reader *r, const char *mode, const char *input);
/* The next document into *doc (its length returned, *doc's capacity in
 * *cap, NUL-terminated, without the final newline); -1 at the end of the
 * input, -2 on a read error (message set). */
ssize_t pre_text_next(pre_text_reader *r, char **doc, size_t *cap);
void pre_text_close(pre_text_reader *r);

#endif
