/* data/tok_spm.h - SentencePiece, internal to data/: a C face on Debian's
 * libsentencepiece (C++), defined in tok_spm_shim.cc. tok.c owns the
 * data_tok handle and Megatron's semantics (tok_spm.c); this only loads a
 * .model file and runs the library's processor on it, so ids are the
 * library's own (what spm_encode and Python's sentencepiece give).
 *
 * Thread safety: encode and decode are const calls on one loaded
 * processor, safe from several threads (the library's contract). Does not
 * parse the model proto itself (tok_spm.c reads the few fields exports need). */
#ifndef MTC_DATA_TOK_SPM_H
#define MTC_DATA_TOK_SPM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tok_spm_proc tok_spm_proc;

/* Loads path; NULL on failure with the library's message in err (cap bytes). */
tok_spm_proc *tok_spm_proc_load(const char *path, char *err, size_t cap);
void tok_spm_proc_free(tok_spm_proc *p);

int tok_spm_proc_size(const tok_spm_proc *p); /* number of pieces */
/* the model's special ids, -1 when the model disabled one */
int tok_spm_proc_bos(const tok_spm_proc *p);
int tok_spm_proc_eos(const tok_spm_proc *p);
int tok_spm_proc_unk(const tok_spm_proc *p);
int tok_spm_proc_pad(const tok_spm_proc *p);
/* id of a piece (the unk id when absent) */
int tok_spm_proc_piece_id(const tok_spm_proc *p, const char *piece, size_t n);
/* piece text of id (valid while p lives), its score, and its kind:
 * 0 normal, 1 unknown, 2 control, 3 user defined, 4 byte, 5 unused */
const char *tok_spm_proc_piece(const tok_spm_proc *p, int id, size_t *n);
float tok_spm_proc_score(const tok_spm_proc *p, int id);
int tok_spm_proc_kind(const tok_spm_proc *p, int id);

/* The processor's Encode(text) as ids: *ids malloc'd (n_ids entries; may
 * be NULL when 0). Returns 0, or -1 out of memory / library error (err). */
int tok_spm_proc_encode(const tok_spm_proc *p, const char *text, size_t n, int **ids, size_t *n_ids,
                        char *err, size_t cap);
/* The processor's Decode(ids) as bytes: *out malloc'd, NUL-terminated. Ids
 * outside [0, size) must be filtered by the caller. Returns 0 or -1. */
int tok_spm_proc_decode(const tok_spm_proc *p, const int *ids, size_t n, char **out, size_t *len,
                        char *err, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
