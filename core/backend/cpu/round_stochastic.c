/*
** lamp_round_stochastic on the CPU: tensor/stochastic_round.h's bulk conversions, over two halves
** on two threads for a large slab (it runs over every parameter once per optimizer step). Each
** half draws the words of its own elements, by index, so the split changes no bit.
*/
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "tensor/stochastic_round.h"

typedef struct sr_pass {
  uint16_t *dst;
  const float *src;
  lamp_dtype dtype;
  uint64_t seed, stream;
} sr_pass;

static void round_range(void *ctx, size_t part, size_t begin, size_t end) {
  (void)part;
  const sr_pass *p = ctx;
  if (p->dtype == LAMP_BF16) lamp_f32_to_bf16_sr_n(p->dst + begin, p->src + begin, end - begin, p->seed, p->stream, begin);
  else lamp_f32_to_f16_sr_n(p->dst + begin, p->src + begin, end - begin, p->seed, p->stream, begin);
}

lamp_status lamp_cpu_round_stochastic(void *dst, lamp_dtype dst_dtype, const float *src, size_t n, uint64_t seed,
                                      uint64_t stream) {
  lamp_status s = lamp_cpu_check_half("round_stochastic", "dst", dst_dtype);
  if (s == LAMP_OK) s = lamp_cpu_check_data("round_stochastic", "dst", dst, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data("round_stochastic", "src", src, n);
  if (s != LAMP_OK) return s;
  sr_pass p = {dst, src, dst_dtype, seed, stream};
  return lamp_cpu_split_pass(n, round_range, &p);
}
