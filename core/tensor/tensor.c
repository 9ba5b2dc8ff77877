#include "tensor/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tensor/dtype.h"
#include "tensor/memory.h"

int lamp_shape_numel(int ndim, const int64_t *shape, size_t *out) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) {
      lamp_error(LAMP_ERR_INVALID_ARG, "tensor: dimension %d is negative (%lld)", i, (long long)shape[i]);
      return 0;
    }
    size_t d = (size_t)shape[i];
    if (d != 0 && n > SIZE_MAX / d) {
      lamp_error(LAMP_ERR_INVALID_ARG, "tensor: shape overflows size_t at dimension %d", i);
      return 0;
    }
    n *= d;
  }
  *out = n;
  return 1;
}

static lamp_status check_shape(int ndim, const int64_t *shape, size_t *numel) {
  if (ndim < 0 || ndim > LAMP_MAX_DIMS)
    return lamp_error(LAMP_ERR_INVALID_ARG, "tensor: %d dimensions, expected 0 to %d", ndim, LAMP_MAX_DIMS);
  if (!lamp_shape_numel(ndim, shape, numel)) return LAMP_ERR_INVALID_ARG;
  return LAMP_OK;
}

static void set_contiguous(lamp_tensor *t, int ndim, const int64_t *shape) {
  t->ndim = ndim;
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    t->shape[i] = shape[i];
    t->stride[i] = stride;
    stride *= shape[i] > 0 ? shape[i] : 1;
  }
}

static lamp_storage *storage_new(lamp_device device, lamp_mem_tag tag, size_t nbytes) {
  lamp_storage *s = calloc(1, sizeof *s);
  if (s == NULL) {
    lamp_error(LAMP_ERR_SYSTEM, "tensor: out of memory");
    return NULL;
  }
  s->data = lamp_mem_alloc(device, tag, nbytes ? nbytes : 1);
  if (s->data == NULL) {
    free(s);
    return NULL;
  }
  s->nbytes = nbytes;
  s->refcount = 1;
  s->device = device;
  s->tag = tag;
  return s;
}

static void storage_release(lamp_storage *s) {
  if (s == NULL || --s->refcount > 0) return;
  lamp_mem_free(s->data);
  free(s);
}

lamp_status lamp_tensor_new(lamp_tensor **out, lamp_dtype dtype, lamp_device device, int ndim,
                            const int64_t *shape, lamp_mem_tag tag) {
  *out = NULL;
  size_t numel;
  lamp_status st = check_shape(ndim, shape, &numel);
  if (st != LAMP_OK) return st;
  size_t esize = lamp_dtype_size(dtype);
  if (esize == 0) return lamp_error(LAMP_ERR_INVALID_ARG, "tensor: unknown dtype %d", (int)dtype);
  if (numel > SIZE_MAX / esize) return lamp_error(LAMP_ERR_INVALID_ARG, "tensor: byte size overflows size_t");
  lamp_tensor *t = calloc(1, sizeof *t);
  if (t == NULL) return lamp_error(LAMP_ERR_SYSTEM, "tensor: out of memory");
  t->storage = storage_new(device, tag, numel * esize);
  if (t->storage == NULL) {
    free(t);
    return LAMP_ERR_SYSTEM;
  }
  t->dtype = dtype;
  t->device = device;
  t->refcount = 1;
  set_contiguous(t, ndim, shape);
  *out = t;
  return LAMP_OK;
}

lamp_status lamp_tensor_view(lamp_tensor **out, lamp_tensor *base, size_t offset, int ndim,
                             const int64_t *shape) {
  size_t esize = lamp_dtype_size(base->dtype);
  if (esize == 0) {
    *out = NULL;
    return lamp_error(LAMP_ERR_INVALID_ARG, "tensor: unknown dtype %d", (int)base->dtype);
  }
  return lamp_tensor_view_as(out, base, offset * esize, base->dtype, ndim, shape);
}

lamp_status lamp_tensor_view_as(lamp_tensor **out, lamp_tensor *base, size_t byte_offset, lamp_dtype dtype, int ndim,
                                const int64_t *shape) {
  *out = NULL;
  size_t numel;
  lamp_status st = check_shape(ndim, shape, &numel);
  if (st != LAMP_OK) return st;
  size_t esize = lamp_dtype_size(dtype), base_size = lamp_dtype_size(base->dtype);
  if (esize == 0 || base_size == 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "tensor: unknown dtype %d", (int)(esize == 0 ? dtype : base->dtype));
  size_t start = base->offset * base_size + byte_offset, elements = base->storage->nbytes / esize;
  if (start < byte_offset || start % esize != 0 || numel > elements || start / esize > elements - numel)
    return lamp_error(LAMP_ERR_INVALID_ARG, "tensor: view of %zu elements at byte %zu exceeds its storage (%zu bytes)",
                      numel, start, base->storage->nbytes);
  lamp_tensor *t = calloc(1, sizeof *t);
  if (t == NULL) return lamp_error(LAMP_ERR_SYSTEM, "tensor: out of memory");
  t->dtype = dtype;
  t->device = base->device;
  t->offset = start / esize;
  t->storage = base->storage;
  t->storage->refcount++;
  t->refcount = 1;
  set_contiguous(t, ndim, shape);
  *out = t;
  return LAMP_OK;
}

lamp_tensor *lamp_tensor_retain(lamp_tensor *t) {
  if (t != NULL) t->refcount++;
  return t;
}

void lamp_tensor_release(lamp_tensor *t) {
  if (t == NULL || --t->refcount > 0) return;
  storage_release(t->storage);
  free(t);
}

lamp_status lamp_tensor_ensure(lamp_tensor **t, lamp_dtype dtype, lamp_device device, int ndim,
                               const int64_t *shape, lamp_mem_tag tag) {
  size_t numel;
  lamp_status st = check_shape(ndim, shape, &numel);
  if (st != LAMP_OK) return st;
  lamp_tensor *cur = *t;
  size_t esize = lamp_dtype_size(dtype);
  if (esize == 0) return lamp_error(LAMP_ERR_INVALID_ARG, "tensor: unknown dtype %d", (int)dtype);
  if (numel > SIZE_MAX / esize) return lamp_error(LAMP_ERR_INVALID_ARG, "tensor: byte size overflows size_t");
  /* Reuse only storage nobody else sees, on the same device and under the same ledger tag. */
  if (cur != NULL && cur->refcount == 1 && cur->storage->refcount == 1 && cur->device == device &&
      cur->storage->tag == tag && cur->offset == 0 && numel * esize <= cur->storage->nbytes) {
    cur->dtype = dtype;
    set_contiguous(cur, ndim, shape);
    return LAMP_OK;
  }
  lamp_tensor *fresh;
  st = lamp_tensor_new(&fresh, dtype, device, ndim, shape, tag);
  if (st != LAMP_OK) return st;
  lamp_tensor_release(cur);
  *t = fresh;
  return LAMP_OK;
}

size_t lamp_tensor_numel(const lamp_tensor *t) {
  size_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  return n;
}

size_t lamp_tensor_nbytes(const lamp_tensor *t) { return lamp_tensor_numel(t) * lamp_dtype_size(t->dtype); }

int lamp_tensor_is_contiguous(const lamp_tensor *t) {
  int64_t expected = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->stride[i] != expected) return 0;
    expected *= t->shape[i];
  }
  return 1;
}

void *lamp_tensor_data(const lamp_tensor *t) {
  return (char *)t->storage->data + t->offset * lamp_dtype_size(t->dtype);
}

const char *lamp_tensor_describe(const lamp_tensor *t, char *buf, size_t size) {
  size_t used = (size_t)snprintf(buf, size, "%s[", lamp_dtype_name(t->dtype));
  for (int i = 0; i < t->ndim && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)t->shape[i]);
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}
