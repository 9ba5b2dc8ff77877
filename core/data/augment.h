/*
** Training-time image augmentation: a random crop of a zero-padded image and a random
** horizontal flip, as torchvision's RandomCrop(size, padding=p) + RandomHorizontalFlip() do.
**
** Both are geometric, so they commute with per-pixel normalisation: the loader applies them
** while it gathers, reading the raw bytes. A pixel outside the image is the raw byte 0 and is
** then normalised like any other (x = (0 - mean_c) / std_c), exactly what torchvision produces
** when the crop pads the uint8/[0, 1] image before Normalize runs.
**
** Randomness: the transform of one sample is drawn from its own generator, seeded from
** (loader seed, epoch, global position of the sample in the epoch's padded order). The global
** position is the DistributedSampler's position, the same whichever rank holds it, so for a
** given seed a sample at a given position of an epoch gets the same crop and flip on 1 rank
** or on N, and a resumed epoch (lamp_loader_seek) repeats exactly what an uninterrupted run
** would have drawn. The stream is independent of the shuffle's (which is seeded seed + epoch).
*/
#ifndef LAMP_DATA_AUGMENT_H
#define LAMP_DATA_AUGMENT_H

#include <stdint.h>

#include "lamp/abi.h"

/* The loader's augmentation options; all zero means none (evaluation). */
typedef struct lamp_augment {
  int crop_pad; /* > 0: pad every side by crop_pad zero pixels, crop back to the original size */
  int flip;     /* non-zero: mirror left-right with probability 1/2 */
} lamp_augment;

/*
** One sample's transform: output pixel (c, i, j) is input pixel
** (c, i + dy, (flip ? cols - 1 - j : j) + dx), or the raw byte 0 outside the image. A crop at
** top-left corner (ty, tx) of the padded image is dy = ty - pad, dx = tx - pad; the flip is
** applied after the crop, as in torchvision's Compose([RandomCrop, RandomHorizontalFlip]).
*/
typedef struct lamp_image_transform {
  int32_t dy, dx;
  int32_t flip;
} lamp_image_transform;

/* The largest crop_pad accepted; more would show nothing but padding for any real image. */
#define LAMP_AUGMENT_MAX_PAD 1024

/* 1 when a has anything to do. */
int lamp_augment_enabled(const lamp_augment *a);

/* Checks 0 <= crop_pad <= LAMP_AUGMENT_MAX_PAD; `what` prefixes the message ("loader for <name>"). */
lamp_status lamp_augment_check(const lamp_augment *a, const char *what);

/*
** The transform of the sample at global position `position` of epoch `epoch` under `seed`.
** Draws, in this order: ty then tx uniform in [0, 2 * crop_pad] (only when crop_pad > 0), then
** the flip bit (only when flip is set). A disabled part leaves its field 0.
*/
void lamp_augment_draw(const lamp_augment *a, uint64_t seed, uint64_t epoch, uint64_t position,
                       lamp_image_transform *t);

/*
** Writes one transformed, normalised sample: src holds channels x rows x cols bytes (CHW),
** lut[c][b] is the normalised value of byte b in channel c, dst gets channels x rows x cols
** floats. t NULL is the identity.
*/
void lamp_augment_apply(const uint8_t *src, int channels, int rows, int cols, const float (*lut)[256],
                        const lamp_image_transform *t, float *dst);

#endif
