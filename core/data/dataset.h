/*
** Labelled image data sets: N images of channels x rows x cols bytes (NCHW) and N label bytes,
** read from IDX files (Fashion-MNIST, [1, 28, 28]) or the CIFAR-10 binary format (data/cifar.h,
** [3, 32, 32]). Kept as bytes and normalised to f32 only when a batch is gathered, so the whole
** of Fashion-MNIST costs 47 MB, not 188.
**
** Data sets are reference counted; a subset is a view that shares its source's storage.
** The counts are not atomic: create, retain and release on one thread; gather may run on
** several at once (it only reads).
*/
#ifndef LAMP_DATA_DATASET_H
#define LAMP_DATA_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "data/augment.h"
#include "tensor/tensor.h"

typedef struct lamp_dataset lamp_dataset;

/* Normalisation is per channel; RGBA is the most a reader produces. */
#define LAMP_DATASET_MAX_CHANNELS 4

/* The directory the name "fashion-mnist" stands for unless LAMP_DATA_DIR is set. */
#define LAMP_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
/* Fashion-MNIST's training-set pixel mean and standard deviation (as PyTorch's reference uses). */
#define LAMP_FASHION_MNIST_MEAN 0.2860f
#define LAMP_FASHION_MNIST_STD 0.3530f
#define LAMP_FASHION_MNIST_CLASSES 10
/* IDX labels are single unsigned bytes. */
#define LAMP_IDX_MAX_CLASSES 256

/*
** name_or_dir: "fashion-mnist" (the directory LAMP_DATA_DIR, or LAMP_FASHION_MNIST_DIR when
** that is unset or empty), or any other string as a directory path holding
** <split>-images-idx3-ubyte[.gz] and <split>-labels-idx1-ubyte[.gz] (write "./fashion-mnist"
** for a directory of that name). split: "train" or "t10k". The .gz file is tried first.
**
** The class count is "fashion-mnist"'s own (LAMP_FASHION_MNIST_CLASSES); for a directory it is
** inferred, and only when the labels present are exactly 0..K-1 (a gap is refused, saying how
** to give the count). Every label must lie in [0, classes); the first that does not is refused
** naming its index and value.
*/
lamp_status lamp_dataset_idx(lamp_dataset **out, const char *name_or_dir, const char *split);

/* The same with the class count given: 1..LAMP_IDX_MAX_CLASSES, or 0 for the rule above. */
lamp_status lamp_dataset_idx_classes(lamp_dataset **out, const char *name_or_dir, const char *split, size_t classes);

/* What a reader hands over to make a data set (lamp_dataset_adopt). */
typedef struct lamp_dataset_bytes {
  const char *name;           /* copied; "<dir>/train" */
  uint8_t *pixels;            /* n * channels * rows * cols bytes, each sample CHW */
  uint8_t *labels;            /* n bytes */
  size_t n;                   /* > 0 */
  int channels, rows, cols;   /* 1..LAMP_DATASET_MAX_CHANNELS, >= 1, >= 1 */
  size_t classes;             /* 0: the largest label + 1; else every label must be below it */
  const float *mean, *std;    /* `channels` values each (copied), or NULL for 0 and 1 */
} lamp_dataset_bytes;

/*
** Makes a data set of the samples in src. pixels and labels must come from
** lamp_mem_alloc(LAMP_HOST, LAMP_MEM_DATA, ...); the data set takes them over, and on failure
** frees them, so the caller never frees them after this call. src->pixels and src->labels are
** set to NULL either way.
*/
lamp_status lamp_dataset_adopt(lamp_dataset **out, lamp_dataset_bytes *src);

/*
** A view of samples [start, start + count) of src sharing its storage; it inherits src's
** normalisation and class count (so a validation slice that happens to lack a class still
** describes the same model output). count must be > 0.
*/
lamp_status lamp_dataset_subset(lamp_dataset **out, lamp_dataset *src, size_t start, size_t count);

lamp_dataset *lamp_dataset_retain(lamp_dataset *ds);
void lamp_dataset_release(lamp_dataset *ds); /* NULL is a no-op */

size_t lamp_dataset_size(const lamp_dataset *ds);
/* The class count: given, known (10 for Fashion-MNIST and CIFAR-10) or inferred (lamp_dataset_idx). */
size_t lamp_dataset_classes(const lamp_dataset *ds);
/* Writes the per-sample shape, {channels, rows, cols} (e.g. {1, 28, 28}, {3, 32, 32}), into
   shape[0..3) and returns 3. */
int lamp_dataset_sample_shape(const lamp_dataset *ds, int64_t *shape);
size_t lamp_dataset_sample_numel(const lamp_dataset *ds);
/* "fashion-mnist/train", "<dir>/t10k"; a subset appends "[start:end]". */
const char *lamp_dataset_name(const lamp_dataset *ds);
int lamp_dataset_channels(const lamp_dataset *ds);

/*
** x = (pixel / 255 - mean_c) / std_c for a pixel of channel c, computed in f32. Defaults:
** fashion-mnist LAMP_FASHION_MNIST_MEAN/STD; CIFAR-10 LAMP_CIFAR10_MEAN/STD (data/cifar.h); a
** plain IDX directory 0 and 1. Every std must be finite and > 0, every mean finite; a failed
** call changes nothing. Affects this data set object only (a subset made earlier keeps its own).
**
** set_normalization sets every channel to the same mean and std; set_channel_normalization
** takes one value per channel, and `channels` must be the data set's channel count.
*/
lamp_status lamp_dataset_set_normalization(lamp_dataset *ds, float mean, float std);
lamp_status lamp_dataset_set_channel_normalization(lamp_dataset *ds, int channels, const float *mean, const float *std);
/* Channel 0's mean and std: the whole story for single-channel data. */
void lamp_dataset_get_normalization(const lamp_dataset *ds, float *mean, float *std);
/* One value per channel into mean[0..channels) and std[0..channels) (either may be NULL). */
void lamp_dataset_get_channel_normalization(const lamp_dataset *ds, float *mean, float *std);

/*
** Gathers samples idx[0..n) into x (f32, CPU, contiguous, n * sample_numel elements with
** shape[0] == n, e.g. [n, 784] or [n, 1, 28, 28]), normalised, and y (i32, CPU, contiguous,
** n elements). Every index is checked before anything is written.
*/
lamp_status lamp_dataset_gather(const lamp_dataset *ds, const size_t *idx, size_t n, lamp_tensor *x, lamp_tensor *y);

/*
** The same, with sample i transformed by tf[i] (data/augment.h) as it is normalised; tf NULL is
** lamp_dataset_gather. Pixels outside the image are the raw byte 0, normalised per channel.
*/
lamp_status lamp_dataset_gather_transformed(const lamp_dataset *ds, const size_t *idx, size_t n,
                                            const lamp_image_transform *tf, lamp_tensor *x, lamp_tensor *y);

#endif
