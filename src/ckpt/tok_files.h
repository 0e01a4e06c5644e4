/* ckpt/tok_files.h - the tokenizer's files travel with the model.
 *
 * The tokenizer's text form (data/tokenizer.h) names files for the BPE kinds:
 *   "GPT2BPETokenizer:<vocab.json>|<merges.txt>"
 *   "HuggingFaceTokenizer:<tokenizer.json>"
 *   "<SentencePiece type>:{"model": <tokenizer.model>, ...}" (Llama2Tokenizer,
 *   SentencePieceTokenizer, GPTSentencePieceTokenizer)
 *   "TikTokenizer:{"model": <vocabulary.json>, ...}"
 * every other form (byte, char, null) holds the whole vocabulary itself.
 * A directory checkpoint keeps copies of the files in its iteration folder
 * under their Hugging Face names (vocab.json, merges.txt, or tokenizer.json
 * with the tokenizer_config.json that stood beside it; a SentencePiece model
 * as tokenizer.model, a tiktoken vocabulary as tiktoken.json), and its
 * metadata names them relative to that folder:
 * "GPT2BPETokenizer:vocab.json|merges.txt", "Llama2Tokenizer:{"model":
 * "tokenizer.model", ...}".
 * A relative name resolves against the folder the form was read from; an
 * absolute one (checkpoints written before the copies) is used as it is.
 * So a checkpoint folder can be moved anywhere and the original files
 * deleted. ckpt/ only copies and compares bytes here: data/ parses them.
 * Does not follow more than one file for the JSON forms. */
#ifndef MTC_CKPT_TOK_FILES_H
#define MTC_CKPT_TOK_FILES_H

#include <stddef.h>

#include "core/result.h"

/* Copies the files `form` names into the existing folder dir and writes the
 * form naming the copies relatively into out (cap bytes). A form naming no
 * files is copied unchanged. MTC_ERR_IO naming the file that cannot be read
 * or written. */
mtc_result_t mtc_ckpt_tok_embed(const char *form, const char *dir, char *out, size_t cap);

/* out (cap bytes) = form with each relative file name made absolute against
 * dir (which need not be absolute). A form naming no files is copied. */
mtc_result_t mtc_ckpt_tok_resolve(const char *form, const char *dir, char *out, size_t cap);

/* 1 when two resolved forms describe the same tokenizer: the same text, or
 * the same kind with files of identical bytes (a checkpoint's copy and the
 * file it was copied from). */
int mtc_ckpt_tok_same(const char *a, const char *b);

/* The form to store beside an export that holds the tokenizer's own files
 * under their Hugging Face names (data_tok_write_hf): a BPE form names those
 * relatively ("GPT2BPETokenizer:vocab.json|merges.txt"); others unchanged. */
mtc_result_t mtc_ckpt_tok_export_form(const char *form, char *out, size_t cap);

/* Copies the file a JSON form names (a SentencePiece model, a tiktoken
 * vocabulary) into dir under its name there (tokenizer.model, tiktoken.json);
 * nothing for the other forms. An export's folder so holds the tokenizer in
 * its native form beside the converted tokenizer.json. */
mtc_result_t mtc_ckpt_tok_copy_model(const char *form, const char *dir);

/* The form of a Hugging Face folder's tokenizer (out: cap bytes, absolute
 * file names): mtc_tokenizer.txt when it names no files (mtc's byte, char and
 * null vocabularies), else a SentencePiece tokenizer.model (with the options
 * of mtc_tokenizer.txt's SentencePiece form when it has one, else
 * Llama2Tokenizer's defaults), else tokenizer.json (HuggingFaceTokenizer),
 * else vocab.json + merges.txt (GPT2BPETokenizer), else mtc_tokenizer.txt's
 * form resolved against dir, else "none". */
mtc_result_t mtc_ckpt_tok_import(const char *dir, char *out, size_t cap);

#endif
