/*
** Checkpoints: a data-only container (never code) of typed key/values ("metas"), named
** tensors and opaque blobs, written atomically and validated completely when read. The
** format is in docs/checkpoint.md; in short: a 32-byte preamble (magic "LAMPCKPT", format
** version, header length, file length, header CRC-32), a text header of one record per line
** (metas, then the tensor table with dtype, shape, offset and CRC-32 of every entry), then
** the raw little-endian data, every entry 64-byte aligned.
**
** The container knows nothing of trainers: the caller decides which keys and tensors make a
** resumable run. The reader never trusts a declared size: every one is checked against the
** file's real length before anything is allocated from it, and it allocates the file's size
** plus an index bounded by LAMP_CKPT_MAX_RECORDS.
*/
#ifndef LAMP_CHECKPOINT_CHECKPOINT_H
#define LAMP_CHECKPOINT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "lamp/abi.h"

#define LAMP_CKPT_FORMAT_VERSION 1
#define LAMP_CKPT_MAX_DIMS 8
#define LAMP_CKPT_MAX_NAME 255
/* Header records (metas + entries) one file may hold; far above any real model. */
#define LAMP_CKPT_MAX_RECORDS 65536

/* Element types. The first five equal lamp_dtype's values, so a lamp_dtype casts directly. */
typedef enum lamp_ckpt_dtype {
  LAMP_CKPT_F32 = 0,
  LAMP_CKPT_F16 = 1,
  LAMP_CKPT_BF16 = 2,
  LAMP_CKPT_I32 = 3,
  LAMP_CKPT_U8 = 4,
  LAMP_CKPT_F64 = 5,
  LAMP_CKPT_I64 = 6,
  LAMP_CKPT_U32 = 7,
  LAMP_CKPT_U64 = 8,
  LAMP_CKPT_DTYPE_COUNT
} lamp_ckpt_dtype;

/* "f32", "f16", "bf16", "i32", "u8", "f64", "i64", "u32", "u64"; "?" when unknown. */
const char *lamp_ckpt_dtype_name(lamp_ckpt_dtype dtype);
/* Bytes per element; 0 when unknown. */
size_t lamp_ckpt_dtype_size(lamp_ckpt_dtype dtype);

typedef enum lamp_ckpt_kind { LAMP_CKPT_TENSOR = 0, LAMP_CKPT_BLOB = 1 } lamp_ckpt_kind;

typedef enum lamp_ckpt_meta_type {
  LAMP_CKPT_META_STR = 0,
  LAMP_CKPT_META_INT = 1,
  LAMP_CKPT_META_DOUBLE = 2
} lamp_ckpt_meta_type;

/* One entry of the tensor table. A blob is dtype u8 with shape {nbytes}. */
typedef struct lamp_ckpt_entry {
  const char *name;
  lamp_ckpt_kind kind;
  lamp_ckpt_dtype dtype;
  int ndim;
  int64_t shape[LAMP_CKPT_MAX_DIMS];
  uint64_t offset;  /* from the start of the data section; a multiple of 64 */
  size_t nbytes;
  uint32_t crc32;   /* zlib's crc32 of the nbytes */
  const void *data; /* 64-byte aligned; valid until lamp_ckpt_close */
} lamp_ckpt_entry;

typedef struct lamp_ckpt_meta {
  const char *key;
  lamp_ckpt_meta_type type;
  const char *str; /* META_STR */
  int64_t i;       /* META_INT */
  double d;        /* META_DOUBLE */
} lamp_ckpt_meta;

/* ---- writing ------------------------------------------------------------------------------ */

typedef struct lamp_ckpt_writer lamp_ckpt_writer;

/* Called after every chunk written (and once at the end) with the bytes written so far. */
typedef void (*lamp_ckpt_progress_fn)(uint64_t written, uint64_t total, void *userdata);

lamp_status lamp_ckpt_writer_new(lamp_ckpt_writer **out);
void lamp_ckpt_writer_free(lamp_ckpt_writer *w); /* NULL is a no-op */

/*
** Keys and names are 1 to 255 characters from A-Z a-z 0-9 _ . : / - + @; a key may not repeat
** among the metas, nor a name among the entries. Strings and blobs are copied. A tensor's data
** is NOT copied (checkpoints are large): it must stay valid and unchanged until the write
** returns. ndim is 0 (a scalar) to LAMP_CKPT_MAX_DIMS; data may be NULL only when empty.
*/
lamp_status lamp_ckpt_add_meta_str(lamp_ckpt_writer *w, const char *key, const char *value);
lamp_status lamp_ckpt_add_meta_int(lamp_ckpt_writer *w, const char *key, int64_t value);
lamp_status lamp_ckpt_add_meta_double(lamp_ckpt_writer *w, const char *key, double value);
lamp_status lamp_ckpt_add_tensor(lamp_ckpt_writer *w, const char *name, lamp_ckpt_dtype dtype, int ndim,
                                 const int64_t *shape, const void *data);
lamp_status lamp_ckpt_add_blob(lamp_ckpt_writer *w, const char *name, const void *data, size_t nbytes);

void lamp_ckpt_writer_set_progress(lamp_ckpt_writer *w, lamp_ckpt_progress_fn fn, void *userdata);

/*
** Writes path atomically: into "path.tmp", fsync, rename over path, fsync the folder. On any
** failure (ENOSPC, EFBIG, EIO, ...) the message names the file and strerror, the .tmp is
** removed and whatever was at path before is untouched.
*/
lamp_status lamp_ckpt_write_atomic(lamp_ckpt_writer *w, const char *path);

/* The whole file in memory (tests, fuzz seeds): *bytes is lamp_mem_alloc'ed; lamp_mem_free it. */
lamp_status lamp_ckpt_write_memory(lamp_ckpt_writer *w, void **bytes, size_t *len);

/* ---- reading ------------------------------------------------------------------------------ */

typedef struct lamp_ckpt lamp_ckpt;

/*
** Reads and validates a whole checkpoint: magic, version, lengths, header checksum, every
** record, every entry's bounds, alignment and CRC-32, and the zero padding between entries.
** On failure *out is NULL, nothing stays allocated, and lamp_last_error() says what is wrong.
*/
lamp_status lamp_ckpt_open(lamp_ckpt **out, const char *path);
/* The same from memory (copied); `name` stands for the path in messages. */
lamp_status lamp_ckpt_open_memory(lamp_ckpt **out, const void *bytes, size_t len, const char *name);
void lamp_ckpt_close(lamp_ckpt *c); /* NULL is a no-op */

const char *lamp_ckpt_name(const lamp_ckpt *c);
uint64_t lamp_ckpt_file_size(const lamp_ckpt *c);

/* Metas and entries in file order; NULL past the end. */
size_t lamp_ckpt_meta_count(const lamp_ckpt *c);
const lamp_ckpt_meta *lamp_ckpt_meta_at(const lamp_ckpt *c, size_t i);
size_t lamp_ckpt_entry_count(const lamp_ckpt *c);
const lamp_ckpt_entry *lamp_ckpt_entry_at(const lamp_ckpt *c, size_t i);

/* 1 when the key is present (any type), else 0: for optional keys. */
int lamp_ckpt_has_meta(const lamp_ckpt *c, const char *key);

/* A missing key or a value of another type is an error naming the file and the key. The string
   stays valid until lamp_ckpt_close. */
lamp_status lamp_ckpt_meta_str(const lamp_ckpt *c, const char *key, const char **out);
lamp_status lamp_ckpt_meta_int(const lamp_ckpt *c, const char *key, int64_t *out);
lamp_status lamp_ckpt_meta_double(const lamp_ckpt *c, const char *key, double *out);

/* The entry named `name` (tensor or blob); an error naming the file when there is none. */
lamp_status lamp_ckpt_find(const lamp_ckpt *c, const char *name, const lamp_ckpt_entry **out);
/* A blob's bytes. */
lamp_status lamp_ckpt_blob(const lamp_ckpt *c, const char *name, const void **data, size_t *nbytes);
/*
** Checks that `name` is a tensor of exactly this dtype and shape:
** "<path>: tensor '0.weight' is f32[512, 784], expected f32[1024, 784]". (A resume checks
** every tensor first and copies only when all match, so a mismatch changes nothing.)
*/
lamp_status lamp_ckpt_check_tensor(const lamp_ckpt *c, const char *name, lamp_ckpt_dtype dtype, int ndim,
                                   const int64_t *shape);
/* The same check, then copies the tensor's nbytes into dst. */
lamp_status lamp_ckpt_read_tensor(const lamp_ckpt *c, const char *name, lamp_ckpt_dtype dtype, int ndim,
                                  const int64_t *shape, void *dst);

/*
** A human-readable dump of the preamble, the metas and the tensor table. *text is malloc'ed;
** free() it.
*/
lamp_status lamp_ckpt_describe(const lamp_ckpt *c, char **text);
lamp_status lamp_ckpt_info(const char *path, char **text);

/* ---- a folder of checkpoints: <dir>/ckpt-<step>.lamp ----------------------------------- */

/* "<dir>/ckpt-00001200.lamp" (the step zero-padded to 8 digits, so names sort by step). */
lamp_status lamp_ckpt_dir_path(char *out, size_t size, const char *dir, uint64_t step);

/*
** Writers of a folder take its lock, an advisory lock (flock) on <dir>/lamp.lock, for a whole
** save and its pruning; a second writer, in this process or another, is refused at once:
** "cannot write checkpoints into <dir>: process 4321 is writing there (it holds <dir>/lamp.lock)".
** The lock dies with its process, so a writer that crashed never blocks the next one.
*/

/*
** Writes the checkpoint of `step` into dir (created if missing) atomically, then keeps the
** `keep` newest complete checkpoints and removes older ones, oldest first (keep <= 0 keeps
** all), under the folder's lock. For a folder with one writer: it removes whatever is oldest.
** A run of a trainer saves with lamp_ckpt_save_run instead. The path written goes to path_out
** when it is not NULL.
*/
lamp_status lamp_ckpt_save_dir(lamp_ckpt_writer *w, const char *dir, uint64_t step, int keep, char *path_out,
                               size_t path_size);

/*
** Removes all but the `keep` newest complete checkpoints of dir, oldest first, under the
** folder's lock. Only names ckpt-<step>.lamp whose preamble and header check out count and are
** removed; *.tmp files and damaged checkpoints are neither counted nor removed (a warning names
** them).
*/
lamp_status lamp_ckpt_prune(const char *dir, int keep);

/*
** A run: one line of training, across its resumes. A folder belongs to the run whose id
** <dir>/lamp.owner holds ("run <16 hex digits>"); a folder without that file (an older lamp's)
** belongs to an id derived from the folder, the one lamp_ckpt_dir_owner reports.
*/
typedef struct lamp_ckpt_run {
  uint64_t id;    /* 0 before the run's first save or resume: a fresh id is drawn then */
  int keep;       /* the newest `keep` complete checkpoints stay; <= 0 keeps all */
  int start_over; /* another run's checkpoints move aside instead of refusing the save */
} lamp_ckpt_run;

/*
** A run's save into dir, under the folder's lock. It writes only into a folder it owns, or one
** without complete checkpoints (it then becomes the owner), and only its own folder is pruned,
** so a save never deletes a checkpoint of another run. A folder holding another run's complete
** checkpoints is refused: "cannot save into <dir>: it holds checkpoints of another run (newest:
** step 16); resume from it, or start over (...)", unless run->start_over: then every checkpoint
** file of dir and its lamp.owner move into a new <dir>/previous-<n> (nothing is deleted; that
** folder can be resumed from) before this run writes. Then as lamp_ckpt_save_dir.
*/
lamp_status lamp_ckpt_save_run(lamp_ckpt_writer *w, const char *dir, uint64_t step, lamp_ckpt_run *run, char *path_out,
                               size_t path_size);

/* The id of the run that owns dir: what a run resuming from dir adopts. 0 when dir is missing. */
lamp_status lamp_ckpt_dir_owner(const char *dir, uint64_t *run_id);

/*
** The newest complete checkpoint of dir: the highest step whose file validates completely.
** *.tmp files are ignored and damaged files skipped, each named in a log line with the reason.
** *found is 0 (and LAMP_OK returned) when dir is missing or holds no checkpoint but unfinished
** *.tmp files. A folder whose checkpoints are all damaged is refused, naming each file and why:
** "cannot resume from <dir>: its 2 checkpoints are all damaged (move them away to start
** afresh):\n  <dir>/ckpt-00000004.lamp: truncated: ...".
*/
lamp_status lamp_ckpt_latest(const char *dir, char *path_out, size_t path_size, uint64_t *step, int *found);

#endif
