/*
** Labelled image data sets: an images file (N, rows, cols) and a labels file (N) in IDX
** format, kept as bytes and normalised to f32 only when a batch is gathered, so the whole of
** Fashion-MNIST costs 47 MB, not 188.
**
** Data sets are reference counted; a subset is a view that shares its source's storage.
** The counts are not atomic: create, retain and release on one thread; gather may run on
** several at once (it only reads).
*/
#ifndef LAMP_DATA_DATASET_H
#define LAMP_DATA_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

typedef struct lamp_dataset lamp_dataset;

/* The directory the name "fashion-mnist" stands for unless LAMP_DATA_DIR is set. */
#define LAMP_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
/* Fashion-MNIST's training-set pixel mean and standard deviation (as PyTorch's reference uses). */
#define LAMP_FASHION_MNIST_MEAN 0.2860f
#define LAMP_FASHION_MNIST_STD 0.3530f

/*
** name_or_dir: "fashion-mnist" (the directory LAMP_DATA_DIR, or LAMP_FASHION_MNIST_DIR when
** that is unset or empty), or any other string as a directory path holding
** <split>-images-idx3-ubyte[.gz] and <split>-labels-idx1-ubyte[.gz] (write "./fashion-mnist"
** for a directory of that name). split: "train" or "t10k". The .gz file is tried first.
*/
lamp_status lamp_dataset_idx(lamp_dataset **out, const char *name_or_dir, const char *split);

/*
** A view of samples [start, start + count) of src sharing its storage; it inherits src's
** normalisation and class count (so a validation slice that happens to lack a class still
** describes the same model output). count must be > 0.
*/
lamp_status lamp_dataset_subset(lamp_dataset **out, lamp_dataset *src, size_t start, size_t count);

lamp_dataset *lamp_dataset_retain(lamp_dataset *ds);
void lamp_dataset_release(lamp_dataset *ds); /* NULL is a no-op */

size_t lamp_dataset_size(const lamp_dataset *ds);
/* Largest label + 1 over the whole file. */
size_t lamp_dataset_classes(const lamp_dataset *ds);
/* Writes the per-sample shape (e.g. {1, 28, 28}) into shape[0..ndim) and returns ndim (3). */
int lamp_dataset_sample_shape(const lamp_dataset *ds, int64_t *shape);
size_t lamp_dataset_sample_numel(const lamp_dataset *ds);
/* "fashion-mnist/train", "<dir>/t10k"; a subset appends "[start:end]". */
const char *lamp_dataset_name(const lamp_dataset *ds);

/*
** x = (pixel / 255 - mean) / std, computed in f32. Defaults: fashion-mnist
** LAMP_FASHION_MNIST_MEAN/STD; a plain directory 0 and 1. std must be finite and > 0.
** Affects this data set object only (a subset made earlier keeps its own).
*/
lamp_status lamp_dataset_set_normalization(lamp_dataset *ds, float mean, float std);
void lamp_dataset_get_normalization(const lamp_dataset *ds, float *mean, float *std);

/*
** Gathers samples idx[0..n) into x (f32, CPU, contiguous, n * sample_numel elements with
** shape[0] == n, e.g. [n, 784] or [n, 1, 28, 28]), normalised, and y (i32, CPU, contiguous,
** n elements). Every index is checked before anything is written.
*/
lamp_status lamp_dataset_gather(const lamp_dataset *ds, const size_t *idx, size_t n, lamp_tensor *x, lamp_tensor *y);

#endif
