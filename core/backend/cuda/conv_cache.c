/* The choice of a cached convolution plan (conv_cache.h). */
#include "backend/cuda/conv_cache.h"

lamp_conv_key lamp_cuda_conv_key(const lamp_conv2d_shape *shape, lamp_dtype compute, const void *const *tensors,
                                 size_t n) {
  int aligned = 1;
  for (size_t i = 0; i < n; i++) aligned = aligned && ((uintptr_t)tensors[i] & 15u) == 0;
  return (lamp_conv_key){.shape = *shape, .compute = compute, .aligned = aligned};
}

int lamp_cuda_conv_key_equal(const lamp_conv_key *a, const lamp_conv_key *b) {
  const lamp_conv2d_shape *s = &a->shape, *t = &b->shape;
  return s->batch == t->batch && s->in_channels == t->in_channels && s->out_channels == t->out_channels &&
         s->groups == t->groups && s->height == t->height && s->width == t->width && s->kernel == t->kernel &&
         s->stride == t->stride && s->padding == t->padding && s->dilation == t->dilation && s->out_h == t->out_h &&
         s->out_w == t->out_w && a->compute == b->compute && a->aligned == b->aligned;
}

size_t lamp_cuda_conv_pick(const lamp_conv_way *const *ways, size_t n, const lamp_conv_key *key, int *hit) {
  size_t pick = 0;
  *hit = 0;
  for (size_t i = 0; i < n; i++)
    if (ways[i]->built && lamp_cuda_conv_key_equal(&ways[i]->key, key)) {
      *hit = 1;
      return i;
    }
  for (size_t i = 0; i < n; i++) {
    if (!ways[i]->built) return i;
    if (ways[i]->used < ways[pick]->used) pick = i;
  }
  return pick;
}
