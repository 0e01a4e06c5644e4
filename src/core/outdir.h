/* core/outdir.h - an output folder (a Hugging Face export: config.json,
 * safetensors shards and their index, tokenizer files) that is replaced as
 * a whole or not at all.
 *
 * Contract, for any writer of a folder:
 *   mtc_outdir_check(path, what)   before any work: path is absent, an empty
 *       folder, or a folder mtc may replace (it holds only regular files and
 *       at least one of config.json, model.safetensors*, mtc_tokenizer.txt:
 *       an earlier export); its parent exists and is writable. Anything else
 *       - a file, FIFO, device, a folder of other things, a missing parent, a
 *       read-only parent, "" - is MTC_ERR_INVALID_ARGUMENT with one line
 *       naming the path and the fix. A symlink at path is not followed: the
 *       link itself is replaced by the new folder (its target is untouched).
 *   mtc_outdir_begin(o, path, what) runs the check, then creates a fresh
 *       temporary sibling folder o->tmp (PARENT/.NAME.mtc-XXXXXX). Write
 *       every file of the output into o->tmp, nowhere else.
 *   mtc_outdir_commit(o) fsyncs every file of o->tmp and the folder, then
 *       puts it in place with one rename (an existing folder is swapped with
 *       renameat2(RENAME_EXCHANGE), then removed), and fsyncs the parent.
 *       Readers see the old folder or the new one, never a mix.
 *   mtc_outdir_abort(o) (and any failed commit) removes o->tmp: on any
 *       failure (ENOSPC, a writer's error, an interrupted run that cleans up)
 *       the old folder is intact and no temporary is left. A process killed
 *       mid-write leaves only its hidden .NAME.mtc-* sibling, never a half
 *       output at path.
 * POSIX + Linux renameat2; the temporary is on the same filesystem as path
 * (a sibling), so the rename cannot copy. */
#ifndef MTC_CORE_OUTDIR_H
#define MTC_CORE_OUTDIR_H

#include "core/outfile.h"
#include "core/result.h"

typedef struct {
    char path[MTC_PATH_MAX];
    char tmp[MTC_PATH_MAX + 64];
    const char *what;
} mtc_outdir;

mtc_result_t mtc_outdir_check(const char *path, const char *what);
mtc_result_t mtc_outdir_begin(mtc_outdir *o, const char *path, const char *what);
mtc_result_t mtc_outdir_commit(mtc_outdir *o);
void mtc_outdir_abort(mtc_outdir *o);

/* Removes path and everything below it without following symlinks (a link
 * is removed, not its target). 0 on success. */
int mtc_rm_tree(const char *path);

#endif
