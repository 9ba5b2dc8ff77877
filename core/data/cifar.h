/*
** The CIFAR-10 binary format (https://www.cs.toronto.edu/~kriz/cifar.html, "binary version"):
** a file is a sequence of 3073-byte records, each one label byte (0..9) followed by a 32x32
** colour image as 1024 red, 1024 green and 1024 blue bytes, every plane row-major. That is
** already CHW, so a record's image is one sample of shape [3, 32, 32] as it stands.
** The official files hold 10,000 records each: data_batch_1.bin .. data_batch_5.bin (train)
** and test_batch.bin (test), in a folder cifar-10-batches-bin/.
**
** Every file is validated record by record before anything is allocated from it; messages name
** the file, and a record by its 0-based index and the byte offset where it starts. A reader
** never allocates more than a constant times the input's size and never trusts a count that
** the input does not prove.
*/
#ifndef LAMP_DATA_CIFAR_H
#define LAMP_DATA_CIFAR_H

#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"

#define LAMP_CIFAR10_IMAGE_BYTES 3072 /* 3 x 32 x 32 */
#define LAMP_CIFAR10_RECORD_BYTES (1 + LAMP_CIFAR10_IMAGE_BYTES)
#define LAMP_CIFAR10_CLASSES 10
/* Six times an official file (all 60,000 images in one); a larger file is not CIFAR-10. */
#define LAMP_CIFAR10_MAX_RECORDS 60000

/* The training set's per-channel (R, G, B) pixel mean and standard deviation on [0, 1]. */
#define LAMP_CIFAR10_MEAN_R 0.4914f
#define LAMP_CIFAR10_MEAN_G 0.4822f
#define LAMP_CIFAR10_MEAN_B 0.4465f
#define LAMP_CIFAR10_STD_R 0.2470f
#define LAMP_CIFAR10_STD_G 0.2435f
#define LAMP_CIFAR10_STD_B 0.2616f

/* One parsed file: n images of LAMP_CIFAR10_IMAGE_BYTES (CHW) and n labels. */
typedef struct lamp_cifar10 {
  uint8_t *pixels; /* lamp_mem_alloc'ed (LAMP_MEM_DATA), n * 3072 bytes */
  uint8_t *labels; /* lamp_mem_alloc'ed (LAMP_MEM_DATA), n bytes */
  size_t n;
} lamp_cifar10;

/*
** Parses the len bytes of one CIFAR-10 file held in memory; `name` (a path, or any label)
** prefixes every message. The whole input is validated before the two output blocks, together
** smaller than len, are allocated. On failure *out is zeroed and nothing stays allocated.
** Safe on any input (a fuzz harness calls it); bytes may be NULL only when len is 0.
*/
lamp_status lamp_cifar10_parse(const uint8_t *bytes, size_t len, const char *name, lamp_cifar10 *out);

/* Frees the blocks and zeroes *c; a zeroed or NULL c is a no-op. */
void lamp_cifar10_free(lamp_cifar10 *c);

/*
** The data set of a split, "train" (data_batch_1.bin .. data_batch_5.bin, in that order) or
** "test" (test_batch.bin), from dir or, when dir lacks the split's first file, from its
** subfolder cifar-10-batches-bin/ (the archive's layout). Samples are [3, 32, 32], 10 classes,
** normalised with LAMP_CIFAR10_MEAN_* / LAMP_CIFAR10_STD_* by default. Named "<dir>/<split>".
*/
lamp_status lamp_dataset_cifar10(lamp_dataset **out, const char *dir, const char *split);

#endif
