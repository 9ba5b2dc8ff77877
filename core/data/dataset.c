#include "data/dataset.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "data/idx.h"
#include "tensor/dtype.h"
#include "tensor/memory.h"

/* The bytes of a data set, shared by a data set and every subset of it. */
typedef struct dataset_store {
  int refcount;
  uint8_t *pixels;  /* n samples of shape[0] x shape[1] x shape[2] bytes, lamp_mem_alloc'ed */
  uint8_t *labels;  /* n bytes, lamp_mem_alloc'ed */
  size_t n;
  int shape[3];     /* channels, rows, cols */
  size_t classes;
  char *name;       /* "fashion-mnist/train" */
} dataset_store;

struct lamp_dataset {
  int refcount;
  dataset_store *store;
  size_t start, count; /* the samples of store this object shows */
  float mean[LAMP_DATASET_MAX_CHANNELS], std[LAMP_DATASET_MAX_CHANNELS];
  /* The normalised value of each pixel byte per channel: gather is one lookup per pixel. */
  float lut[LAMP_DATASET_MAX_CHANNELS][256];
  char *name;
};

static const char *const valid_splits[] = {"train", "t10k"};

/* Where a data set's files are and how to talk about it in messages. */
typedef struct source {
  int named;         /* "fashion-mnist" rather than a directory the caller gave */
  const char *dir;
  const char *label; /* "fashion-mnist" or the directory, prefixing "cannot open" messages */
  const char *hint;  /* appended to "No such file or directory", or "" */
  size_t classes;    /* the data set's known class count, or 0 for a directory's (inferred) */
  float mean, std;
} source;

static void resolve_source(const char *name_or_dir, source *src) {
  if (strcmp(name_or_dir, "fashion-mnist") == 0) {
    const char *env = getenv("LAMP_DATA_DIR");
    src->named = 1;
    src->dir = env != NULL && env[0] != '\0' ? env : LAMP_FASHION_MNIST_DIR;
    src->label = "fashion-mnist";
    src->hint = " (install the Debian package dataset-fashion-mnist, or set LAMP_DATA_DIR)";
    src->classes = LAMP_FASHION_MNIST_CLASSES;
    src->mean = LAMP_FASHION_MNIST_MEAN;
    src->std = LAMP_FASHION_MNIST_STD;
  } else {
    src->named = 0;
    src->dir = name_or_dir;
    src->label = name_or_dir;
    src->hint = "";
    src->classes = 0;
    src->mean = 0.0f;
    src->std = 1.0f;
  }
}

static lamp_status check_split(const char *label, const char *split) {
  for (size_t i = 0; i < sizeof valid_splits / sizeof *valid_splits; i++)
    if (strcmp(split, valid_splits[i]) == 0) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "%s: unknown split \"%s\" (valid: train, t10k)", label, split);
}

/* malloc'ed "<a><b><c><d>"; NULL (with an error) when out of memory. */
static char *concat(const char *a, const char *b, const char *c, const char *d) {
  size_t n = strlen(a) + strlen(b) + strlen(c) + strlen(d) + 1;
  char *s = malloc(n);
  if (s == NULL) {
    lamp_error(LAMP_ERR_SYSTEM, "dataset: out of memory");
    return NULL;
  }
  snprintf(s, n, "%s%s%s%s", a, b, c, d);
  return s;
}

/* "<dir>/<file>", without doubling a slash the user already wrote. */
static char *join_path(const char *dir, const char *file, const char *ext) {
  size_t len = strlen(dir);
  return concat(dir, len > 0 && dir[len - 1] == '/' ? "" : "/", file, ext);
}

/* Fills *path with the .gz file if it exists, else the raw one; the .gz is named if neither does. */
static lamp_status find_file(const source *src, const char *file, char **path) {
  struct stat sb;
  char *gz = join_path(src->dir, file, ".gz");
  if (gz == NULL) return LAMP_ERR_SYSTEM;
  if (stat(gz, &sb) == 0) {
    *path = gz;
    return LAMP_OK;
  }
  int gz_errno = errno;
  char *raw = join_path(src->dir, file, "");
  if (raw == NULL) {
    free(gz);
    return LAMP_ERR_SYSTEM;
  }
  if (gz_errno == ENOENT && stat(raw, &sb) == 0) {
    free(gz);
    *path = raw;
    return LAMP_OK;
  }
  lamp_status st = lamp_error(gz_errno == ENOENT ? LAMP_ERR_INVALID_USAGE : LAMP_ERR_SYSTEM, "%s: cannot open %s: %s%s",
                              src->label, gz, strerror(gz_errno), gz_errno == ENOENT ? src->hint : "");
  free(gz);
  free(raw);
  return st;
}

static lamp_status read_file(const source *src, const char *split, const char *kind, lamp_idx *out, char **path) {
  char *file = concat(split, kind, "", "");
  if (file == NULL) return LAMP_ERR_SYSTEM;
  lamp_status st = find_file(src, file, path);
  free(file);
  if (st != LAMP_OK) return st;
  st = lamp_idx_read(*path, out);
  if (st != LAMP_OK) {
    free(*path);
    *path = NULL;
  }
  return st;
}

/* The pair must describe the same N samples: images (N, rows, cols), labels (N). */
static lamp_status check_pair(const char *name, const lamp_idx *images, const lamp_idx *labels, const char *image_path,
                              const char *label_path) {
  if (images->ndim != 3)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: %s has %d dimensions, expected 3 (images, rows, columns)", name,
                      image_path, images->ndim);
  if (labels->ndim != 1)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: %s has %d dimensions, expected 1 (one label per image)", name,
                      label_path, labels->ndim);
  if (images->dims[0] != labels->dims[0])
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: %s holds %u images but %s holds %u labels", name, image_path,
                      (unsigned)images->dims[0], label_path, (unsigned)labels->dims[0]);
  return LAMP_OK;
}

static size_t count_classes(const uint8_t *labels, size_t n) {
  uint8_t max = 0;
  for (size_t i = 0; i < n; i++)
    if (labels[i] > max) max = labels[i];
  return (size_t)max + 1;
}

static void store_release(dataset_store *s) {
  if (s == NULL || --s->refcount > 0) return;
  lamp_mem_free(s->pixels);
  lamp_mem_free(s->labels);
  free(s->name);
  free(s);
}

/*
** Reads and checks the images + labels pair into *images and *labels (zeroed on failure);
** *label_path (malloc'ed) names the labels file for later messages.
*/
static lamp_status load_pair(const source *src, const char *name, const char *split, lamp_idx *images,
                             lamp_idx *labels, char **label_path) {
  char *image_path = NULL;
  *label_path = NULL;
  memset(images, 0, sizeof *images); /* a missing images file returns before lamp_idx_read zeroes it */
  memset(labels, 0, sizeof *labels);
  lamp_status st = read_file(src, split, "-images-idx3-ubyte", images, &image_path);
  if (st == LAMP_OK) st = read_file(src, split, "-labels-idx1-ubyte", labels, label_path);
  if (st == LAMP_OK) st = check_pair(name, images, labels, image_path, *label_path);
  free(image_path);
  if (st != LAMP_OK) {
    lamp_idx_free(images);
    lamp_idx_free(labels);
    free(*label_path);
    *label_path = NULL;
  }
  return st;
}

/* Every label is below classes; the first that is not is named with its index. */
static lamp_status check_label_range(const char *name, const char *label_path, const uint8_t *labels, size_t n,
                                     size_t classes, const char *why) {
  for (size_t i = 0; i < n; i++)
    if (labels[i] >= classes)
      return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: label %u at index %zu of %s is outside [0, %zu) (%s)", name,
                        (unsigned)labels[i], i, label_path, classes, why);
  return LAMP_OK;
}

/*
** The class count of a directory's labels, inferred only when the labels present are exactly
** 0..K-1: a gap means some class lacks samples or the labels are not class indices, and either
** way the count cannot be known from the file.
*/
static lamp_status infer_classes(const char *name, const char *label_path, const uint8_t *labels, size_t n,
                                 size_t *classes) {
  int seen[256] = {0};
  unsigned max = 0;
  for (size_t i = 0; i < n; i++) {
    seen[labels[i]] = 1;
    if (labels[i] > max) max = labels[i];
  }
  for (unsigned c = 0; c < max; c++)
    if (!seen[c])
      return lamp_error(LAMP_ERR_INVALID_USAGE,
                        "%s: cannot infer the number of classes: the labels in %s go up to %u but label %u never "
                        "occurs, so they are not 0 to K-1; give the count with lamp.data.idx(dir, split, "
                        "{classes = N})",
                        name, label_path, max, c);
  *classes = (size_t)max + 1;
  return LAMP_OK;
}

/* The class count for the labels: the caller's, else the data set's own, else inferred. */
static lamp_status resolve_classes(const source *src, const char *name, const char *label_path, const lamp_idx *labels,
                                   size_t requested, size_t *classes) {
  char why[64];
  if (requested != 0) {
    snprintf(why, sizeof why, "classes = %zu", requested);
    *classes = requested;
  } else if (src->classes != 0) {
    snprintf(why, sizeof why, "%s has %zu classes", src->label, src->classes);
    *classes = src->classes;
  } else {
    return infer_classes(name, label_path, labels->data, labels->nbytes, classes);
  }
  return check_label_range(name, label_path, labels->data, labels->nbytes, *classes, why);
}

static void fill_lut(lamp_dataset *ds) {
  for (int c = 0; c < ds->store->shape[0]; c++)
    for (int p = 0; p < 256; p++) ds->lut[c][p] = ((float)p / 255.0f - ds->mean[c]) / ds->std[c];
}

/* A new data set object over [start, start + count) of store, which it retains. */
static lamp_status dataset_new(lamp_dataset **out, dataset_store *store, size_t start, size_t count, const float *mean,
                               const float *std) {
  lamp_dataset *ds = calloc(1, sizeof *ds);
  if (ds == NULL) return lamp_error(LAMP_ERR_SYSTEM, "dataset: out of memory");
  if (start == 0 && count == store->n) {
    ds->name = concat(store->name, "", "", "");
  } else {
    char range[64];
    snprintf(range, sizeof range, "[%zu:%zu]", start, start + count);
    ds->name = concat(store->name, range, "", "");
  }
  if (ds->name == NULL) {
    free(ds);
    return LAMP_ERR_SYSTEM;
  }
  ds->refcount = 1;
  ds->store = store;
  store->refcount++;
  ds->start = start;
  ds->count = count;
  for (int c = 0; c < store->shape[0]; c++) {
    ds->mean[c] = mean != NULL ? mean[c] : 0.0f;
    ds->std[c] = std != NULL ? std[c] : 1.0f;
  }
  fill_lut(ds);
  *out = ds;
  return LAMP_OK;
}

static lamp_status check_bytes(const lamp_dataset_bytes *src) {
  const char *name = src->name != NULL ? src->name : "dataset";
  if (src->pixels == NULL || src->labels == NULL || src->n == 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: a data set needs pixels, labels and at least one sample", name);
  if (src->channels < 1 || src->channels > LAMP_DATASET_MAX_CHANNELS || src->rows < 1 || src->cols < 1)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: sample shape [%d, %d, %d] is invalid (1 to %d channels, rows and "
                      "columns >= 1)", name, src->channels, src->rows, src->cols, LAMP_DATASET_MAX_CHANNELS);
  size_t numel = (size_t)src->channels * (size_t)src->rows * (size_t)src->cols;
  if (src->n > SIZE_MAX / numel || lamp_mem_size(src->pixels) < src->n * numel || lamp_mem_size(src->labels) < src->n)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: the pixel or label block is smaller than %zu samples of %zu bytes",
                      name, src->n, numel);
  for (size_t i = 0; src->classes != 0 && i < src->n; i++)
    if (src->labels[i] >= src->classes)
      return lamp_error(LAMP_ERR_INVALID_ARG, "%s: label %u at index %zu is outside [0, %zu)", name,
                        (unsigned)src->labels[i], i, src->classes);
  if ((src->mean == NULL) != (src->std == NULL))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: default normalisation needs both mean and std, or neither", name);
  for (int c = 0; src->std != NULL && c < src->channels; c++)
    if (!isfinite(src->std[c]) || !(src->std[c] > 0.0f) || !isfinite(src->mean[c]))
      return lamp_error(LAMP_ERR_INVALID_ARG, "%s: default normalisation of channel %d is invalid", name, c);
  return LAMP_OK;
}

/* A store over the bytes src hands over; the caller has checked them. */
static lamp_status store_new(dataset_store **out, lamp_dataset_bytes *src) {
  dataset_store *s = calloc(1, sizeof *s);
  char *name = concat(src->name != NULL ? src->name : "dataset", "", "", "");
  if (s == NULL || name == NULL) {
    free(s);
    free(name);
    return lamp_error(LAMP_ERR_SYSTEM, "dataset: out of memory");
  }
  s->refcount = 1;
  s->pixels = src->pixels;
  s->labels = src->labels;
  src->pixels = src->labels = NULL;
  s->n = src->n;
  s->shape[0] = src->channels;
  s->shape[1] = src->rows;
  s->shape[2] = src->cols;
  s->classes = src->classes != 0 ? src->classes : count_classes(s->labels, s->n);
  s->name = name;
  *out = s;
  return LAMP_OK;
}

lamp_status lamp_dataset_adopt(lamp_dataset **out, lamp_dataset_bytes *src) {
  if (out != NULL) *out = NULL;
  if (src == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "dataset: adopt of NULL");
  lamp_status st = out == NULL ? lamp_error(LAMP_ERR_INVALID_ARG, "dataset: output is NULL") : check_bytes(src);
  dataset_store *s = NULL;
  if (st == LAMP_OK) st = store_new(&s, src);
  if (st == LAMP_OK) st = dataset_new(out, s, 0, s->n, src->mean, src->std);
  if (s != NULL) store_release(s); /* the data set holds its own reference now */
  lamp_mem_free(src->pixels);       /* still here only when the store was never made */
  lamp_mem_free(src->labels);
  src->pixels = src->labels = NULL;
  return st;
}

lamp_status lamp_dataset_idx_classes(lamp_dataset **out, const char *name_or_dir, const char *split, size_t classes) {
  if (out == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "dataset: output is NULL");
  *out = NULL;
  if (name_or_dir == NULL || split == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "dataset: name and split are required");
  source src;
  resolve_source(name_or_dir, &src);
  lamp_status st = check_split(src.label, split);
  if (st != LAMP_OK) return st;
  if (classes > LAMP_IDX_MAX_CLASSES)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: classes must be 1 to %d (IDX labels are single bytes), got %zu",
                      src.label, LAMP_IDX_MAX_CLASSES, classes);
  char *name = src.named ? concat(src.label, "/", split, "") : join_path(src.dir, split, "");
  if (name == NULL) return LAMP_ERR_SYSTEM;
  lamp_idx images, labels;
  char *label_path;
  st = load_pair(&src, name, split, &images, &labels, &label_path);
  if (st == LAMP_OK) st = resolve_classes(&src, name, label_path, &labels, classes, &classes);
  if (st == LAMP_OK) {
    lamp_dataset_bytes bytes = {.name = name, .pixels = images.data, .labels = labels.data, .n = images.dims[0],
                                .channels = 1, .rows = (int)images.dims[1], .cols = (int)images.dims[2],
                                .classes = classes, .mean = &src.mean, .std = &src.std};
    st = lamp_dataset_adopt(out, &bytes); /* takes the blocks, also on failure */
  } else {
    lamp_idx_free(&images);
    lamp_idx_free(&labels);
  }
  free(label_path);
  free(name);
  return st;
}

lamp_status lamp_dataset_idx(lamp_dataset **out, const char *name_or_dir, const char *split) {
  return lamp_dataset_idx_classes(out, name_or_dir, split, 0);
}

lamp_status lamp_dataset_subset(lamp_dataset **out, lamp_dataset *src, size_t start, size_t count) {
  if (out == NULL || src == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "dataset: subset of NULL");
  *out = NULL;
  if (count == 0) return lamp_error(LAMP_ERR_INVALID_ARG, "%s: subset of 0 samples at %zu", src->name, start);
  if (start > src->count || count > src->count - start)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: subset [%zu, %zu + %zu) is outside its %zu samples", src->name, start,
                      start, count, src->count);
  return dataset_new(out, src->store, src->start + start, count, src->mean, src->std);
}

lamp_dataset *lamp_dataset_retain(lamp_dataset *ds) {
  if (ds != NULL) ds->refcount++;
  return ds;
}

void lamp_dataset_release(lamp_dataset *ds) {
  if (ds == NULL || --ds->refcount > 0) return;
  store_release(ds->store);
  free(ds->name);
  free(ds);
}

size_t lamp_dataset_size(const lamp_dataset *ds) { return ds->count; }

size_t lamp_dataset_classes(const lamp_dataset *ds) { return ds->store->classes; }

int lamp_dataset_sample_shape(const lamp_dataset *ds, int64_t *shape) {
  for (int i = 0; i < 3; i++) shape[i] = ds->store->shape[i];
  return 3;
}

size_t lamp_dataset_sample_numel(const lamp_dataset *ds) {
  return (size_t)ds->store->shape[0] * (size_t)ds->store->shape[1] * (size_t)ds->store->shape[2];
}

const char *lamp_dataset_name(const lamp_dataset *ds) { return ds->name; }

int lamp_dataset_channels(const lamp_dataset *ds) { return ds->store->shape[0]; }

/* Checks one channel's pair; `channel` < 0 for the scalar form, whose messages name no channel. */
static lamp_status check_norm(const lamp_dataset *ds, int channel, float mean, float std) {
  char which[48] = "";
  if (channel >= 0) snprintf(which, sizeof which, " of channel %d", channel);
  if (!isfinite(std) || !(std > 0.0f))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: normalisation std%s must be finite and > 0, got %g", ds->name, which,
                      (double)std);
  if (!isfinite(mean))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: normalisation mean%s must be finite, got %g", ds->name, which,
                      (double)mean);
  return LAMP_OK;
}

lamp_status lamp_dataset_set_normalization(lamp_dataset *ds, float mean, float std) {
  lamp_status st = check_norm(ds, -1, mean, std);
  if (st != LAMP_OK) return st;
  for (int c = 0; c < ds->store->shape[0]; c++) {
    ds->mean[c] = mean;
    ds->std[c] = std;
  }
  fill_lut(ds);
  return LAMP_OK;
}

lamp_status lamp_dataset_set_channel_normalization(lamp_dataset *ds, int channels, const float *mean, const float *std) {
  if (ds == NULL || mean == NULL || std == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "dataset: set_channel_normalization needs a data set, mean and std");
  if (channels != ds->store->shape[0])
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: normalisation gives %d channel%s, the data set has %d", ds->name,
                      channels, channels == 1 ? "" : "s", ds->store->shape[0]);
  for (int c = 0; c < channels; c++) {
    lamp_status st = check_norm(ds, c, mean[c], std[c]);
    if (st != LAMP_OK) return st;
  }
  for (int c = 0; c < channels; c++) {
    ds->mean[c] = mean[c];
    ds->std[c] = std[c];
  }
  fill_lut(ds);
  return LAMP_OK;
}

void lamp_dataset_get_normalization(const lamp_dataset *ds, float *mean, float *std) {
  if (mean != NULL) *mean = ds->mean[0];
  if (std != NULL) *std = ds->std[0];
}

void lamp_dataset_get_channel_normalization(const lamp_dataset *ds, float *mean, float *std) {
  for (int c = 0; c < ds->store->shape[0]; c++) {
    if (mean != NULL) mean[c] = ds->mean[c];
    if (std != NULL) std[c] = ds->std[c];
  }
}

static int tensor_fits(const lamp_tensor *t, lamp_dtype dtype, size_t n, size_t numel) {
  return t->dtype == dtype && t->device == LAMP_HOST && lamp_tensor_is_contiguous(t) && t->ndim >= 1 &&
         t->shape[0] == (int64_t)n && lamp_tensor_numel(t) == numel;
}

static lamp_status check_gather(const lamp_dataset *ds, const size_t *idx, size_t n, const lamp_tensor *x,
                                const lamp_tensor *y) {
  char got[128];
  size_t numel = lamp_dataset_sample_numel(ds);
  if (n > 0 && idx == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "%s: gather of %zu samples without indices", ds->name, n);
  if (x == NULL || y == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "%s: gather needs x and y tensors", ds->name);
  if (n > SIZE_MAX / numel) return lamp_error(LAMP_ERR_INVALID_ARG, "%s: gather of %zu samples overflows", ds->name, n);
  if (!tensor_fits(x, LAMP_F32, n, n * numel))
    return lamp_error(LAMP_ERR_INVALID_ARG,
                      "%s: gather needs x as a contiguous cpu f32 tensor [%zu, ...] of %zu elements, got %s %s", ds->name,
                      n, n * numel, lamp_device_name(x->device), lamp_tensor_describe(x, got, sizeof got));
  if (!tensor_fits(y, LAMP_I32, n, n))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: gather needs y as a contiguous cpu i32 tensor [%zu], got %s %s",
                      ds->name, n, lamp_device_name(y->device), lamp_tensor_describe(y, got, sizeof got));
  for (size_t i = 0; i < n; i++)
    if (idx[i] >= ds->count)
      return lamp_error(LAMP_ERR_INVALID_ARG, "%s: gather index %zu (at position %zu) is out of range for %zu samples",
                        ds->name, idx[i], i, ds->count);
  return LAMP_OK;
}

lamp_status lamp_dataset_gather_transformed(const lamp_dataset *ds, const size_t *idx, size_t n,
                                            const lamp_image_transform *tf, lamp_tensor *x, lamp_tensor *y) {
  if (ds == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "dataset: gather from NULL");
  lamp_status st = check_gather(ds, idx, n, x, y);
  if (st != LAMP_OK) return st;
  size_t numel = lamp_dataset_sample_numel(ds);
  const int *shape = ds->store->shape;
  float *xd = lamp_tensor_data(x);
  int32_t *yd = lamp_tensor_data(y);
  for (size_t i = 0; i < n; i++) {
    size_t sample = ds->start + idx[i];
    lamp_augment_apply(ds->store->pixels + sample * numel, shape[0], shape[1], shape[2],
                       (const float(*)[256])ds->lut, tf != NULL ? &tf[i] : NULL, xd + i * numel);
    yd[i] = ds->store->labels[sample];
  }
  return LAMP_OK;
}

lamp_status lamp_dataset_gather(const lamp_dataset *ds, const size_t *idx, size_t n, lamp_tensor *x, lamp_tensor *y) {
  return lamp_dataset_gather_transformed(ds, idx, n, NULL, x, y);
}
