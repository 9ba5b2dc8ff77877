/*
** The fused unscale-and-check behind lamp_host.unscale_and_check: one pass that multiplies the
** gradients by 1/S and notes any inf/NaN. The check is on the product, so an overflow caused
** by the multiply itself (inv_scale > 1) is caught too. isfinite survives because the build
** never enables fast-math (see CMakeLists.txt).
*/
#include <math.h>

#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"

#define BLOCK LAMP_CPU_BLOCK

/* Returns nonzero if any product is not finite. No early exit: every element is scaled. */
static int unscale_f32(float *g, size_t n, float inv_scale) {
  int bad = 0;
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK) {
    for (size_t j = 0; j < BLOCK; j++) {
      float v = g[i + j] * inv_scale;
      g[i + j] = v;
      bad |= !isfinite(v);
    }
  }
  for (; i < n; i++) {
    g[i] *= inv_scale;
    bad |= !isfinite(g[i]);
  }
  return bad;
}

/* inv_scale == 1 (bf16, fp32, or a scale of 1): a read-only pass is enough. */
static int check_f32(const float *g, size_t n) {
  int bad = 0;
  size_t i = 0;
  for (; i + BLOCK <= n; i += BLOCK)
    for (size_t j = 0; j < BLOCK; j++) bad |= !isfinite(g[i + j]);
  for (; i < n; i++) bad |= !isfinite(g[i]);
  return bad;
}

lamp_status lamp_unscale_and_check(lamp_device device, float *g, size_t n, float inv_scale,
                                   int *found_inf) {
  if (device != LAMP_CPU) return lamp_cpu_unsupported_device("unscale_and_check", device);
  lamp_status s = lamp_cpu_check_data("unscale_and_check", "g", g, n);
  if (s == LAMP_OK) s = lamp_cpu_check_data("unscale_and_check", "found_inf", found_inf, 1);
  if (s != LAMP_OK) return s;
  int bad = inv_scale == 1.0f ? check_f32(g, n) : unscale_f32(g, n, inv_scale);
  if (bad) *found_inf = 1; /* never cleared here: callers accumulate over several buffers */
  return LAMP_OK;
}
