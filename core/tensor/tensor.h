/*
** Tensors: a dtype, a device, a shape with strides (in elements), and a reference-counted
** storage shared by views. Most kernels want contiguous row-major tensors; views into the
** flat parameter and gradient slabs are how layers see their weights.
*/
#ifndef LAMP_TENSOR_TENSOR_H
#define LAMP_TENSOR_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "lamp/host.h"

#define LAMP_MAX_DIMS 6

typedef struct lamp_storage {
  void *data;
  size_t nbytes;
  int refcount;
  lamp_device device;
  lamp_mem_tag tag;
} lamp_storage;

typedef struct lamp_tensor {
  lamp_dtype dtype;
  lamp_device device;
  int ndim;
  int64_t shape[LAMP_MAX_DIMS];
  int64_t stride[LAMP_MAX_DIMS];
  size_t offset; /* in elements, into storage */
  lamp_storage *storage;
  int refcount;
} lamp_tensor;

/* A new zero-filled contiguous tensor; its bytes are charged to `tag` in the ledger. */
lamp_status lamp_tensor_new(lamp_tensor **out, lamp_dtype dtype, lamp_device device, int ndim,
                            const int64_t *shape, lamp_mem_tag tag);

/* A contiguous view of `base`'s storage starting `offset` elements past base's own offset. */
lamp_status lamp_tensor_view(lamp_tensor **out, lamp_tensor *base, size_t offset, int ndim,
                             const int64_t *shape);

/* The same with a dtype of its own, `byte_offset` bytes past base's start (a multiple of the
   dtype's size): one buffer carved into tensors of several dtypes (core/nn/scratch.c). */
lamp_status lamp_tensor_view_as(lamp_tensor **out, lamp_tensor *base, size_t byte_offset, lamp_dtype dtype, int ndim,
                                const int64_t *shape);

lamp_tensor *lamp_tensor_retain(lamp_tensor *t);
void lamp_tensor_release(lamp_tensor *t); /* NULL is a no-op */

/*
** Makes *t a contiguous tensor of this dtype and shape, reusing its storage when it is large
** enough (activation buffers across batches of different sizes). *t may be NULL.
*/
lamp_status lamp_tensor_ensure(lamp_tensor **t, lamp_dtype dtype, lamp_device device, int ndim,
                               const int64_t *shape, lamp_mem_tag tag);

size_t lamp_tensor_numel(const lamp_tensor *t);
size_t lamp_tensor_nbytes(const lamp_tensor *t);
int lamp_tensor_is_contiguous(const lamp_tensor *t);
void *lamp_tensor_data(const lamp_tensor *t);

/* Writes "f32[128, 784]" into buf. */
const char *lamp_tensor_describe(const lamp_tensor *t, char *buf, size_t size);

/* Product of shape with overflow checking; returns 0 and sets an error on overflow. */
int lamp_shape_numel(int ndim, const int64_t *shape, size_t *out);

#endif
