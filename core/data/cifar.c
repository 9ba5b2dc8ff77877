#include "data/cifar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "data/file.h"
#include "tensor/memory.h"

#define RECORD ((size_t)LAMP_CIFAR10_RECORD_BYTES)
#define IMAGE ((size_t)LAMP_CIFAR10_IMAGE_BYTES)
#define SUBFOLDER "cifar-10-batches-bin"

static const char *const train_files[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                          "data_batch_4.bin", "data_batch_5.bin"};
static const char *const test_files[] = {"test_batch.bin"};

/* ---- one file's bytes ------------------------------------------------------------------- */

/* The number of records in a file of len bytes, or an error saying why len is impossible. */
static lamp_status check_size(const char *name, size_t len, size_t *records) {
  if (len == 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s: empty file; CIFAR-10 records are %zu bytes (1 label byte, then %zu pixel bytes)", name,
                      RECORD, IMAGE);
  if (len < RECORD)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s: size %zu is smaller than one CIFAR-10 record (%zu bytes: 1 label byte, then %zu pixel bytes)",
                      name, len, RECORD, IMAGE);
  if (len / RECORD > LAMP_CIFAR10_MAX_RECORDS)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s: size %zu is more than %d CIFAR-10 records (%zu bytes), the most one file may hold",
                      name, len, LAMP_CIFAR10_MAX_RECORDS, (size_t)LAMP_CIFAR10_MAX_RECORDS * RECORD);
  if (len % RECORD != 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "%s: size %zu is not a multiple of the CIFAR-10 record size %zu: record %zu (at byte %zu) is "
                      "truncated, %zu of its %zu bytes are present",
                      name, len, RECORD, len / RECORD, len / RECORD * RECORD, len % RECORD, RECORD);
  *records = len / RECORD;
  return LAMP_OK;
}

/* Every record's label is 0..9; the first that is not is named. */
static lamp_status check_labels(const char *name, const uint8_t *bytes, size_t records) {
  for (size_t r = 0; r < records; r++) {
    uint8_t label = bytes[r * RECORD];
    if (label >= LAMP_CIFAR10_CLASSES)
      return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: record %zu (at byte %zu) has label %u; CIFAR-10 labels are 0 to %d",
                        name, r, r * RECORD, (unsigned)label, LAMP_CIFAR10_CLASSES - 1);
  }
  return LAMP_OK;
}

/* Splits checked records into the pixel and label blocks (records * IMAGE and records bytes). */
static void split_records(const uint8_t *bytes, size_t records, uint8_t *pixels, uint8_t *labels) {
  for (size_t r = 0; r < records; r++) {
    labels[r] = bytes[r * RECORD];
    memcpy(pixels + r * IMAGE, bytes + r * RECORD + 1, IMAGE);
  }
}

static lamp_status alloc_blocks(size_t records, uint8_t **pixels, uint8_t **labels) {
  *pixels = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_DATA, records * IMAGE);
  *labels = *pixels == NULL ? NULL : lamp_mem_alloc(LAMP_HOST, LAMP_MEM_DATA, records);
  if (*labels != NULL) return LAMP_OK;
  lamp_mem_free(*pixels);
  *pixels = NULL;
  return LAMP_ERR_SYSTEM;
}

lamp_status lamp_cifar10_parse(const uint8_t *bytes, size_t len, const char *name, lamp_cifar10 *out) {
  if (out == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "cifar10: output is NULL");
  memset(out, 0, sizeof *out);
  if (name == NULL) name = "cifar10";
  if (bytes == NULL && len > 0) return lamp_error(LAMP_ERR_INVALID_ARG, "%s: %zu bytes at NULL", name, len);
  size_t records = 0;
  lamp_status st = check_size(name, len, &records);
  if (st == LAMP_OK) st = check_labels(name, bytes, records);
  if (st == LAMP_OK) st = alloc_blocks(records, &out->pixels, &out->labels);
  if (st != LAMP_OK) return st;
  split_records(bytes, records, out->pixels, out->labels);
  out->n = records;
  return LAMP_OK;
}

void lamp_cifar10_free(lamp_cifar10 *c) {
  if (c == NULL) return;
  lamp_mem_free(c->pixels);
  lamp_mem_free(c->labels);
  memset(c, 0, sizeof *c);
}

/* ---- a split's files -------------------------------------------------------------------- */

/* The files of a split and where they are. */
typedef struct split_files {
  const char *dir;    /* as the caller gave it */
  const char *split;
  const char *const *names;
  size_t count;
  char *folder;       /* dir, or dir/cifar-10-batches-bin */
  char **paths;       /* count entries */
  size_t *records;    /* count entries */
} split_files;

/* malloc'ed "<dir>/<file>", without doubling a slash the user already wrote. */
static char *join_path(const char *dir, const char *file) {
  size_t len = strlen(dir), n = len + 1 + strlen(file) + 1;
  char *s = malloc(n);
  if (s == NULL) {
    lamp_error(LAMP_ERR_SYSTEM, "cifar10: out of memory");
    return NULL;
  }
  snprintf(s, n, "%s%s%s", dir, len > 0 && dir[len - 1] == '/' ? "" : "/", file);
  return s;
}

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* dir itself when it holds the split's first file, else the archive's subfolder if that does. */
static lamp_status choose_folder(split_files *f) {
  char *direct = join_path(f->dir, f->names[0]);
  if (direct == NULL) return LAMP_ERR_SYSTEM;
  int here = exists(direct);
  free(direct);
  if (!here) {
    char *sub = join_path(f->dir, SUBFOLDER);
    char *first = sub == NULL ? NULL : join_path(sub, f->names[0]);
    if (first != NULL && exists(first)) {
      free(first);
      f->folder = sub;
      return LAMP_OK;
    }
    free(first);
    free(sub);
  }
  size_t len = strlen(f->dir) + 1;
  if ((f->folder = malloc(len)) == NULL) return lamp_error(LAMP_ERR_SYSTEM, "cifar10: out of memory");
  memcpy(f->folder, f->dir, len);
  return LAMP_OK;
}

/* "data_batch_1.bin to data_batch_5.bin" or "test_batch.bin" */
static const char *expected_files(const split_files *f, char *buf, size_t size) {
  if (f->count == 1) snprintf(buf, size, "%s", f->names[0]);
  else snprintf(buf, size, "%s to %s", f->names[0], f->names[f->count - 1]);
  return buf;
}

/* "(CIFAR-10 train needs data_batch_1.bin to data_batch_5.bin in DIR or in DIR/cifar-10-batches-bin)" */
static const char *missing_hint(const split_files *f, char *buf, size_t size) {
  char want[96];
  snprintf(buf, size, " (CIFAR-10 %s needs %s in %s or in %s/" SUBFOLDER ")", f->split,
           expected_files(f, want, sizeof want), f->dir, f->dir);
  return buf;
}

/* The size of file i, checked as a CIFAR-10 file, into f->records[i]; reads nothing yet. */
static lamp_status stat_file(split_files *f, size_t i) {
  char hint[2048];
  int fd;
  uint64_t size;
  lamp_status st = lamp_data_open(f->paths[i], missing_hint(f, hint, sizeof hint), &fd, &size);
  if (st != LAMP_OK) return st;
  close(fd);
  return check_size(f->paths[i], size > SIZE_MAX ? SIZE_MAX : (size_t)size, &f->records[i]);
}

/* Reads exactly len bytes of path into buf; a file that changed size since stat is an error. */
static lamp_status read_exactly(const char *path, uint8_t *buf, size_t len) {
  int fd;
  uint64_t size;
  lamp_status st = lamp_data_open(path, NULL, &fd, &size);
  if (st != LAMP_OK) return st;
  size_t got = 0;
  uint8_t extra;
  size_t more = 0;
  st = lamp_data_read(path, fd, buf, len, &got);
  if (st == LAMP_OK && got == len) st = lamp_data_read(path, fd, &extra, 1, &more);
  close(fd);
  if (st != LAMP_OK) return st;
  if (got != len || more != 0)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: the file changed while it was read (%zu bytes expected)", path, len);
  return LAMP_OK;
}

/* File i's records into pixels/labels, through a scratch block the size of the file. */
static lamp_status load_file(const split_files *f, size_t i, uint8_t *pixels, uint8_t *labels) {
  size_t len = f->records[i] * RECORD;
  uint8_t *bytes = lamp_mem_alloc(LAMP_HOST, LAMP_MEM_DATA, len);
  if (bytes == NULL) return LAMP_ERR_SYSTEM;
  lamp_status st = read_exactly(f->paths[i], bytes, len);
  if (st == LAMP_OK) st = check_labels(f->paths[i], bytes, f->records[i]);
  if (st == LAMP_OK) split_records(bytes, f->records[i], pixels, labels);
  lamp_mem_free(bytes);
  return st;
}

/* Every file of the split, concatenated in order, into one pixel and one label block. */
static lamp_status load_split(split_files *f, lamp_dataset_bytes *out) {
  size_t total = 0;
  for (size_t i = 0; i < f->count; i++) {
    if ((f->paths[i] = join_path(f->folder, f->names[i])) == NULL) return LAMP_ERR_SYSTEM;
    lamp_status st = stat_file(f, i);
    if (st != LAMP_OK) return st;
    total += f->records[i]; /* at most 5 x LAMP_CIFAR10_MAX_RECORDS: no overflow */
  }
  lamp_status st = alloc_blocks(total, &out->pixels, &out->labels);
  for (size_t i = 0, done = 0; st == LAMP_OK && i < f->count; done += f->records[i++])
    st = load_file(f, i, out->pixels + done * IMAGE, out->labels + done);
  out->n = total;
  return st;
}

static void free_split(split_files *f) {
  for (size_t i = 0; f->paths != NULL && i < f->count; i++) free(f->paths[i]);
  free(f->paths);
  free(f->records);
  free(f->folder);
}

static lamp_status pick_split(split_files *f, const char *dir, const char *split) {
  memset(f, 0, sizeof *f);
  f->dir = dir;
  f->split = split;
  if (strcmp(split, "train") == 0) {
    f->names = train_files;
    f->count = sizeof train_files / sizeof *train_files;
  } else if (strcmp(split, "test") == 0) {
    f->names = test_files;
    f->count = 1;
  } else {
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: unknown CIFAR-10 split \"%s\" (valid: train, test)", dir, split);
  }
  f->paths = calloc(f->count, sizeof *f->paths);
  f->records = calloc(f->count, sizeof *f->records);
  if (f->paths == NULL || f->records == NULL) return lamp_error(LAMP_ERR_SYSTEM, "cifar10: out of memory");
  return choose_folder(f);
}

lamp_status lamp_dataset_cifar10(lamp_dataset **out, const char *dir, const char *split) {
  if (out == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "cifar10: output is NULL");
  *out = NULL;
  if (dir == NULL || split == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "cifar10: directory and split are required");
  static const float mean[3] = {LAMP_CIFAR10_MEAN_R, LAMP_CIFAR10_MEAN_G, LAMP_CIFAR10_MEAN_B};
  static const float std[3] = {LAMP_CIFAR10_STD_R, LAMP_CIFAR10_STD_G, LAMP_CIFAR10_STD_B};
  lamp_dataset_bytes bytes = {.channels = 3, .rows = 32, .cols = 32, .classes = LAMP_CIFAR10_CLASSES,
                              .mean = mean, .std = std};
  split_files f;
  lamp_status st = pick_split(&f, dir, split);
  if (st == LAMP_OK) st = load_split(&f, &bytes);
  char *name = st == LAMP_OK ? join_path(dir, split) : NULL;
  if (st == LAMP_OK && name == NULL) st = LAMP_ERR_SYSTEM;
  bytes.name = name;
  if (st == LAMP_OK) {
    st = lamp_dataset_adopt(out, &bytes); /* takes the blocks, also on failure */
  } else {
    lamp_mem_free(bytes.pixels);
    lamp_mem_free(bytes.labels);
  }
  free(name);
  free_split(&f);
  return st;
}
