/* core/outfile.h - output files that never replace what they should not
 * and are never left half-written.
 *
 * mtc_outfile_check validates a path before any work starts: a path that
 * exists must be a regular file (a device, FIFO, socket or directory is
 * refused), a symlink is never followed: the new file replaces the link
 * itself and the link's target is untouched (docs/formats.md, "Outputs"),
 * and the folder must exist and be writable. mtc_outfile_open / _commit write through a temporary
 * file in the target's folder with a short fixed-length name (so a long target name still fits
 * NAME_MAX), fsync it, rename it over the target and fsync the folder; _abort (or a failed commit)
 * removes the temporary file. Every error is one line naming the path, what it is for and the fix
 * (MTC_ERR_INVALID_ARGUMENT for a bad path, MTC_ERR_IO for a failed write). */
#ifndef MTC_CORE_OUTFILE_H
#define MTC_CORE_OUTFILE_H

#include <stddef.h>
#include <stdio.h>

#include "core/result.h"

#define MTC_PATH_MAX 4096

/* real (cap bytes) receives the path to write: path itself (kept for
 * callers that compare outputs). `what` names the output in messages
 * ("--svg"). */
mtc_result_t mtc_outfile_check(const char *path, const char *what, char *real, size_t cap);

typedef struct {
    FILE *f;
    char path[MTC_PATH_MAX]; /* the target (a symlink resolved) */
    char tmp[MTC_PATH_MAX + 16];
    const char *what;
} mtc_outfile;

mtc_result_t mtc_outfile_open(mtc_outfile *o, const char *path, const char *what);
/* Flush, fsync, rename over the target, fsync the folder; on any failure
 * the temporary file is removed and the target left as it was. */
mtc_result_t mtc_outfile_commit(mtc_outfile *o);
void mtc_outfile_abort(mtc_outfile *o);

/* Inputs: fopen(path, "rb") that never blocks on what it opens. The open is
 * non-blocking (a FIFO's open waits for a writer forever) and anything but
 * a regular file is refused (a FIFO, device - /dev/zero never ends -,
 * socket or directory): MTC_ERR_INVALID_ARGUMENT "PATH is a FIFO, not a
 * regular file (pass a file)"; a failed open is MTC_ERR_IO "cannot open
 * PATH: <reason>". The FILE reads blocking as usual. */
mtc_result_t mtc_infile_open(const char *path, FILE **out);
/* The same checks for a raw descriptor (O_RDONLY, blocking once open);
 * *size receives the file's size. */
mtc_result_t mtc_infile_open_fd(const char *path, int *fd, unsigned long long *size);
/* A file of a folder (a checkpoint piece, an HF shard or config) must stay
 * in it: path, with every symlink resolved, must lie under dir's resolved
 * path, else MTC_ERR_FORMAT "PATH resolves to TARGET, outside FOLDER (a
 * symlink out of the folder: copy the file in)". A missing file passes
 * (the open that follows names it). */
mtc_result_t mtc_infile_inside(const char *path, const char *dir);

#endif
