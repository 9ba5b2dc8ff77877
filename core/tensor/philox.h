/*
** The core's counter-based generator: Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel
** random numbers: as easy as 1, 2, 3", SC 2011), the generator cuRAND and PyTorch draw from on
** GPUs. A counter-based generator has no state: the bits are a function of a key and a counter,
** so any element's bits can be computed where and when that element is processed, in any
** order, on any device and thread count, and a run resumed from a checkpoint needs nothing
** beyond the key and the counter to continue the same stream. Stochastic rounding
** (tensor/stochastic_round.h) draws from it.
*/
#ifndef LAMP_TENSOR_PHILOX_H
#define LAMP_TENSOR_PHILOX_H

#include <stddef.h>
#include <stdint.h>

/* Philox4x32-10: out = the four 32-bit words for counter ctr under key. */
void lamp_philox4x32(uint32_t out[4], const uint32_t ctr[4], const uint32_t key[2]);

/*
** Which counter and word an element takes: elements come in groups of 64; element j of group g
** takes word j / 16 of counter g * 16 + j % 16. The 64 words of sixteen consecutive counters thus
** cover 64 consecutive elements, and a vector of 16 (or 8, or 4) counters yields, word by word,
** consecutive elements: no shuffling on the CPU, coalesced stores on the GPU.
*/
#define LAMP_PHILOX_GROUP 64
#define LAMP_PHILOX_LANES 16

/*
** The random word of element `index` of a stream: the word above, with the key (the low and high
** halves of `seed`) and the counter (the element's block, low and high halves, then `stream`'s).
*/
uint32_t lamp_philox_word(uint64_t seed, uint64_t stream, uint64_t index);

/* words[j] = lamp_philox_word(seed, stream, group * 64 + j) for j < count * 64: `count`
   consecutive groups at once (vectorised where the CPU allows; the same bits on every path). */
void lamp_philox_groups(uint32_t *words, size_t count, uint64_t seed, uint64_t stream, uint64_t group);

#endif
