#include "data/augment.h"

#include <stddef.h>

#include "base/error.h"
#include "tensor/rng.h"

/* Separates this stream from every other use of the seed (the shuffle seeds seed + epoch). */
#define AUGMENT_STREAM 0x6175676d656e7431ull /* "augment1" */

/* splitmix64's finaliser: a bijection that spreads every input bit over the whole word. */
static uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int lamp_augment_enabled(const lamp_augment *a) { return a != NULL && (a->crop_pad > 0 || a->flip); }

lamp_status lamp_augment_check(const lamp_augment *a, const char *what) {
  if (a->crop_pad < 0 || a->crop_pad > LAMP_AUGMENT_MAX_PAD)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: augment crop_pad must be in [0, %d], got %d", what,
                      LAMP_AUGMENT_MAX_PAD, a->crop_pad);
  return LAMP_OK;
}

void lamp_augment_draw(const lamp_augment *a, uint64_t seed, uint64_t epoch, uint64_t position,
                       lamp_image_transform *t) {
  /* Chained rather than summed, so (seed, epoch, position) triples never collide by arithmetic. */
  lamp_rng rng;
  lamp_rng_seed(&rng, mix(mix(mix(AUGMENT_STREAM ^ seed) ^ epoch) ^ position));
  t->dy = t->dx = t->flip = 0;
  if (a->crop_pad > 0) {
    uint64_t span = 2 * (uint64_t)a->crop_pad + 1;
    t->dy = (int32_t)lamp_rng_below(&rng, span) - a->crop_pad;
    t->dx = (int32_t)lamp_rng_below(&rng, span) - a->crop_pad;
  }
  if (a->flip) t->flip = (int32_t)lamp_rng_below(&rng, 2);
}

/* One output row of one channel: src_row is the input row it reads, or NULL for padding. */
static void apply_row(const uint8_t *src_row, int cols, const float *lut, const lamp_image_transform *t,
                      float *dst) {
  if (src_row == NULL) {
    for (int j = 0; j < cols; j++) dst[j] = lut[0];
    return;
  }
  for (int j = 0; j < cols; j++) {
    int s = (t->flip ? cols - 1 - j : j) + t->dx;
    dst[j] = lut[s >= 0 && s < cols ? src_row[s] : 0];
  }
}

void lamp_augment_apply(const uint8_t *src, int channels, int rows, int cols, const float (*lut)[256],
                        const lamp_image_transform *t, float *dst) {
  size_t plane = (size_t)rows * (size_t)cols;
  if (t == NULL || (t->dy == 0 && t->dx == 0 && !t->flip)) {
    for (int c = 0; c < channels; c++)
      for (size_t k = 0; k < plane; k++) dst[c * plane + k] = lut[c][src[c * plane + k]];
    return;
  }
  for (int c = 0; c < channels; c++) {
    const uint8_t *in = src + c * plane;
    for (int i = 0; i < rows; i++) {
      int r = i + t->dy;
      apply_row(r >= 0 && r < rows ? in + (size_t)r * cols : NULL, cols, lut[c], t, dst + c * plane + (size_t)i * cols);
    }
  }
}
