/*
** The one random generator of the core (xoshiro256** seeded through splitmix64): parameter
** initialisation and shuffling draw from it, so a seed reproduces a run bit for bit on every
** platform.
*/
#ifndef LAMP_TENSOR_RNG_H
#define LAMP_TENSOR_RNG_H

#include <stdint.h>

typedef struct lamp_rng {
  uint64_t s[4];
} lamp_rng;

void lamp_rng_seed(lamp_rng *r, uint64_t seed);
uint64_t lamp_rng_next(lamp_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double lamp_rng_uniform(lamp_rng *r);
/* Uniform integer in [0, n), unbiased; n > 0. */
uint64_t lamp_rng_below(lamp_rng *r, uint64_t n);
/* Standard normal (Box-Muller). */
double lamp_rng_normal(lamp_rng *r);

#endif
