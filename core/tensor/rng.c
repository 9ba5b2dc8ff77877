#include "tensor/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void lamp_rng_seed(lamp_rng *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t lamp_rng_next(lamp_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double lamp_rng_uniform(lamp_rng *r) { return (double)(lamp_rng_next(r) >> 11) * 0x1.0p-53; }

uint64_t lamp_rng_below(lamp_rng *r, uint64_t n) {
  if (n == 0) return 0; /* documented as n > 0; an empty range has only one sensible answer */
  /* Rejection keeps the draw unbiased: discard the top partial bucket. */
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = lamp_rng_next(r);
  while (x >= limit);
  return x % n;
}

double lamp_rng_normal(lamp_rng *r) {
  double u1 = lamp_rng_uniform(r);
  double u2 = lamp_rng_uniform(r);
  if (u1 < 0x1.0p-60) u1 = 0x1.0p-60;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
