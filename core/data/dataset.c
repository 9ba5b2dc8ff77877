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

/* The bytes of one images + labels pair, shared by a data set and every subset of it. */
typedef struct dataset_store {
  int refcount;
  lamp_idx images; /* (N, rows, cols) */
  lamp_idx labels; /* (N) */
  size_t classes;
  char *name;      /* "fashion-mnist/train" */
} dataset_store;

struct lamp_dataset {
  int refcount;
  dataset_store *store;
  size_t start, count; /* the samples of store this object shows */
  float mean, std;
  float lut[256];      /* normalised value of each pixel byte: gather is one lookup per pixel */
  char *name;
};

static const char *const valid_splits[] = {"train", "t10k"};

/* Where a data set's files are and how to talk about it in messages. */
typedef struct source {
  int named;         /* "fashion-mnist" rather than a directory the caller gave */
  const char *dir;
  const char *label; /* "fashion-mnist" or the directory, prefixing "cannot open" messages */
  const char *hint;  /* appended to "No such file or directory", or "" */
  float mean, std;
} source;

static void resolve_source(const char *name_or_dir, source *src) {
  if (strcmp(name_or_dir, "fashion-mnist") == 0) {
    const char *env = getenv("LAMP_DATA_DIR");
    src->named = 1;
    src->dir = env != NULL && env[0] != '\0' ? env : LAMP_FASHION_MNIST_DIR;
    src->label = "fashion-mnist";
    src->hint = " (install the Debian package dataset-fashion-mnist, or set LAMP_DATA_DIR)";
    src->mean = LAMP_FASHION_MNIST_MEAN;
    src->std = LAMP_FASHION_MNIST_STD;
  } else {
    src->named = 0;
    src->dir = name_or_dir;
    src->label = name_or_dir;
    src->hint = "";
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
static lamp_status check_pair(const dataset_store *s, const char *image_path, const char *label_path) {
  if (s->images.ndim != 3)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: %s has %d dimensions, expected 3 (images, rows, columns)", s->name,
                      image_path, s->images.ndim);
  if (s->labels.ndim != 1)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: %s has %d dimensions, expected 1 (one label per image)", s->name,
                      label_path, s->labels.ndim);
  if (s->images.dims[0] != s->labels.dims[0])
    return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: %s holds %u images but %s holds %u labels", s->name, image_path,
                      (unsigned)s->images.dims[0], label_path, (unsigned)s->labels.dims[0]);
  return LAMP_OK;
}

static size_t count_classes(const lamp_idx *labels) {
  uint8_t max = 0;
  for (size_t i = 0; i < labels->nbytes; i++)
    if (labels->data[i] > max) max = labels->data[i];
  return (size_t)max + 1;
}

static void store_release(dataset_store *s) {
  if (s == NULL || --s->refcount > 0) return;
  lamp_idx_free(&s->images);
  lamp_idx_free(&s->labels);
  free(s->name);
  free(s);
}

static lamp_status load_store(dataset_store *s, const source *src, const char *split) {
  char *image_path = NULL, *label_path = NULL;
  lamp_status st = read_file(src, split, "-images-idx3-ubyte", &s->images, &image_path);
  if (st == LAMP_OK) st = read_file(src, split, "-labels-idx1-ubyte", &s->labels, &label_path);
  if (st == LAMP_OK) st = check_pair(s, image_path, label_path);
  if (st == LAMP_OK) s->classes = count_classes(&s->labels);
  free(image_path);
  free(label_path);
  return st;
}

static void fill_lut(lamp_dataset *ds) {
  for (int p = 0; p < 256; p++) ds->lut[p] = ((float)p / 255.0f - ds->mean) / ds->std;
}

/* A new data set object over [start, start + count) of store, which it retains. */
static lamp_status dataset_new(lamp_dataset **out, dataset_store *store, size_t start, size_t count, float mean,
                               float std) {
  lamp_dataset *ds = calloc(1, sizeof *ds);
  if (ds == NULL) return lamp_error(LAMP_ERR_SYSTEM, "dataset: out of memory");
  if (start == 0 && count == store->images.dims[0]) {
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
  ds->mean = mean;
  ds->std = std;
  fill_lut(ds);
  *out = ds;
  return LAMP_OK;
}

lamp_status lamp_dataset_idx(lamp_dataset **out, const char *name_or_dir, const char *split) {
  if (out == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "dataset: output is NULL");
  *out = NULL;
  if (name_or_dir == NULL || split == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "dataset: name and split are required");
  source src;
  resolve_source(name_or_dir, &src);
  lamp_status st = check_split(src.label, split);
  if (st != LAMP_OK) return st;
  dataset_store *s = calloc(1, sizeof *s);
  if (s == NULL) return lamp_error(LAMP_ERR_SYSTEM, "dataset: out of memory");
  s->refcount = 1;
  s->name = src.named ? concat(src.label, "/", split, "") : join_path(src.dir, split, "");
  st = s->name == NULL ? LAMP_ERR_SYSTEM : load_store(s, &src, split);
  if (st == LAMP_OK) st = dataset_new(out, s, 0, s->images.dims[0], src.mean, src.std);
  store_release(s); /* the data set holds its own reference now */
  return st;
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
  shape[0] = 1;
  shape[1] = ds->store->images.dims[1];
  shape[2] = ds->store->images.dims[2];
  return 3;
}

size_t lamp_dataset_sample_numel(const lamp_dataset *ds) {
  return (size_t)ds->store->images.dims[1] * ds->store->images.dims[2];
}

const char *lamp_dataset_name(const lamp_dataset *ds) { return ds->name; }

lamp_status lamp_dataset_set_normalization(lamp_dataset *ds, float mean, float std) {
  if (!isfinite(std) || !(std > 0.0f))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: normalisation std must be finite and > 0, got %g", ds->name, (double)std);
  if (!isfinite(mean))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: normalisation mean must be finite, got %g", ds->name, (double)mean);
  ds->mean = mean;
  ds->std = std;
  fill_lut(ds);
  return LAMP_OK;
}

void lamp_dataset_get_normalization(const lamp_dataset *ds, float *mean, float *std) {
  if (mean != NULL) *mean = ds->mean;
  if (std != NULL) *std = ds->std;
}

static int tensor_fits(const lamp_tensor *t, lamp_dtype dtype, size_t n, size_t numel) {
  return t->dtype == dtype && t->device == LAMP_CPU && lamp_tensor_is_contiguous(t) && t->ndim >= 1 &&
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

lamp_status lamp_dataset_gather(const lamp_dataset *ds, const size_t *idx, size_t n, lamp_tensor *x, lamp_tensor *y) {
  if (ds == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "dataset: gather from NULL");
  lamp_status st = check_gather(ds, idx, n, x, y);
  if (st != LAMP_OK) return st;
  size_t numel = lamp_dataset_sample_numel(ds);
  float *xd = lamp_tensor_data(x);
  int32_t *yd = lamp_tensor_data(y);
  const uint8_t *images = ds->store->images.data;
  const uint8_t *labels = ds->store->labels.data;
  for (size_t i = 0; i < n; i++) {
    size_t sample = ds->start + idx[i];
    const uint8_t *pixels = images + sample * numel;
    float *dst = xd + i * numel;
    for (size_t j = 0; j < numel; j++) dst[j] = ds->lut[pixels[j]];
    yd[i] = labels[sample];
  }
  return LAMP_OK;
}
