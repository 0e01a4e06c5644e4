/* ckpt/dist_internal.h - helpers shared by the files of ckpt/ (not a public
 * header): durable writes with the fault-injection hook, small-file reads. */
#ifndef MTC_CKPT_DIST_INTERNAL_H
#define MTC_CKPT_DIST_INTERNAL_H

#include <stddef.h>

#include "ckpt/dist.h"
#include "core/result.h"

/* 1 when this is the f->after-th write point counted on f (NULL: never). */
int ckpt_fault_point(mtc_ckpt_fault *f);
/* Dies as kill -9 would. */
void ckpt_fault_die(void);
/* write(2) until done (a fault point: tears the write, then dies). */
mtc_result_t ckpt_write_all(int fd, const void *buf, size_t n, const char *path, mtc_ckpt_fault *f);
mtc_result_t ckpt_fsync_fd(int fd, const char *path, mtc_ckpt_fault *f);
mtc_result_t ckpt_fsync_dir(const char *path, mtc_ckpt_fault *f);
/* A whole file into a NUL-terminated buffer (caller frees). */
mtc_result_t ckpt_read_text(const char *path, char **out, size_t *len);

#endif
