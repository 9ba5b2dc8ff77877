/*
** Which of a layer's cached cuDNN plans a call uses (conv_cudnn.c). A plan is made for one key
** (the shape, batch included, the compute dtype, and whether every tensor is 16-byte aligned);
** a layer keeps a few per product, because the last batch of an epoch and evaluation batches
** have other sizes than the training batches, and rebuilding on every switch would run cuDNN's
** heuristics twice an epoch for every layer.
*/
#ifndef LAMP_BACKEND_CUDA_CONV_CACHE_H
#define LAMP_BACKEND_CUDA_CONV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#define LAMP_CONV_CACHE_WAYS 4

typedef struct lamp_conv_key {
  lamp_conv2d_shape shape;
  lamp_dtype compute;
  int aligned; /* every tensor on a 16-byte boundary (else cuDNN is told the element size) */
} lamp_conv_key;

/* A cache entry's bookkeeping: what it holds and when it was last used. */
typedef struct lamp_conv_way {
  int built;
  lamp_conv_key key;
  uint64_t used; /* the call count at its last use; 0 never */
} lamp_conv_way;

/* The key of a call with these tensors (NULL pointers, absent tensors, do not count). */
lamp_conv_key lamp_cuda_conv_key(const lamp_conv2d_shape *shape, lamp_dtype compute, const void *const *tensors,
                                 size_t n);

int lamp_cuda_conv_key_equal(const lamp_conv_key *a, const lamp_conv_key *b);

/* The way of ways[0 .. n) for key: one holding it (*hit = 1), else one never built, else the
   least recently used (*hit = 0: the caller rebuilds it). */
size_t lamp_cuda_conv_pick(const lamp_conv_way *const *ways, size_t n, const lamp_conv_key *key, int *hit);

#endif
