/*
** optim_bench: the fused optimizer steps against memcpy over the same slab size, in one run
** (scripts/bench/optim.sh builds and runs it). Each figure is effective bandwidth, the bytes a
** pass must read plus the bytes it writes, over its best time of --repeat passes:
**
**     memcpy          src read, dst written                       8 B/element
**     adamw step      p, g, m, v read; p, m, v written            28 B/element
**     sgd step        p, g, buf read; p, buf written (momentum)   20 B/element
**
** The steps go through the real plugins and lamp_optim_apply, one segment over the whole slab,
** on the path a training run takes early on (bias correction not yet 1).
**
**   optim_bench [--elements=N] [--repeat=R]     (default 16777216 elements = 64 MiB, 10)
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "plugin/instance.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *slab(size_t n, float value) {
  float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
  if (p == NULL) {
    fprintf(stderr, "optim_bench: out of memory for %zu elements\n", n);
    exit(1);
  }
  for (size_t i = 0; i < n; i++) p[i] = value; /* touches every page before timing */
  return p;
}

static lamp_optim *open_optim(const char *name, const lamp_option *opts, size_t n_opts,
                              uint32_t want_slots) {
  lamp_optim *o = NULL;
  lamp_optim_slot decls[LAMP_OPTIM_MAX_SLOTS];
  uint32_t n = 0;
  if (lamp_optim_open(&o, name, opts, n_opts) != LAMP_OK ||
      lamp_optim_slots(o, decls, LAMP_OPTIM_MAX_SLOTS, &n) != LAMP_OK) {
    fprintf(stderr, "optim_bench: %s\n", lamp_last_error());
    exit(1);
  }
  if (n != want_slots) {
    fprintf(stderr, "optim_bench: %s declares %u slots, expected %u\n", name, (unsigned)n,
            (unsigned)want_slots);
    exit(1);
  }
  return o;
}

/* One optimizer step over the whole slab; returns its time in seconds. */
static double timed_step(lamp_optim *o, float *p, const float *g, float *const *slots, size_t n,
                         uint64_t step, double lr) {
  const lamp_optim_segment whole = {0, n, 1.0f, 1.0f};
  lamp_optim_step s = {.device = LAMP_CPU, .n = n, .params = p, .grads = g, .slots = slots,
                       .segments = &whole, .n_segments = 1, .step = step, .lr = lr,
                       .grad_scale = 1.0};
  const double t0 = now();
  if (lamp_optim_apply(o, &s) != LAMP_OK) {
    fprintf(stderr, "optim_bench: %s\n", lamp_last_error());
    exit(1);
  }
  return now() - t0;
}

static double min_d(double a, double b) { return a < b ? a : b; }

int main(int argc, char **argv) {
  size_t n = (size_t)1 << 24;
  int repeat = 10;
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--elements=", 11) == 0)
      n = strtoull(argv[i] + 11, NULL, 10);
    else if (strncmp(argv[i], "--repeat=", 9) == 0)
      repeat = atoi(argv[i] + 9);
    else {
      fprintf(stderr, "optim_bench: unknown argument %s (--elements=N, --repeat=R)\n", argv[i]);
      return 2;
    }
  }
  if (n == 0 || repeat < 1) {
    fprintf(stderr, "optim_bench: need --elements >= 1 and --repeat >= 1\n");
    return 2;
  }

  float *p = slab(n, 0.5f), *g = slab(n, 1e-3f), *m = slab(n, 0.0f), *v = slab(n, 0.0f);
  float *dst = slab(n, 0.0f), *buf = slab(n, 0.0f);
  const lamp_option sgd_opts[] = {{"momentum", 0.9}};
  lamp_optim *adamw = open_optim("adamw", NULL, 0, 2);
  lamp_optim *sgd = open_optim("sgd", sgd_opts, 1, 1);
  float *adam_slots[2] = {m, v}, *sgd_slots[1] = {buf};

  /* Interleaved rounds, so a noisy neighbour hurts all three alike; the best of each counts. */
  double t_copy = 1e30, t_adam = 1e30, t_sgd = 1e30;
  for (int r = 0; r <= repeat; r++) { /* round 0 warms up and is not counted */
    double t0 = now();
    memcpy(dst, p, n * sizeof(float));
    const double tc = now() - t0;
    const double ta = timed_step(adamw, p, g, adam_slots, n, (uint64_t)r + 1, 1e-3);
    const double ts = timed_step(sgd, p, g, sgd_slots, n, (uint64_t)r + 2, 1e-3);
    if (r == 0) continue;
    t_copy = min_d(t_copy, tc);
    t_adam = min_d(t_adam, ta);
    t_sgd = min_d(t_sgd, ts);
  }
  const double mb = (double)n * sizeof(float) / (1024.0 * 1024.0);
  const double copy_gbs = 8.0 * (double)n / t_copy / 1e9;
  const double adam_gbs = 28.0 * (double)n / t_adam / 1e9;
  const double sgd_gbs = 20.0 * (double)n / t_sgd / 1e9;
  printf("slab %zu elements (%.0f MiB fp32), best of %d\n", n, mb, repeat);
  printf("%-34s %8.2f ms %8.2f GB/s\n", "memcpy (8 B/element)", 1e3 * t_copy, copy_gbs);
  printf("%-34s %8.2f ms %8.2f GB/s  %5.1f %% of memcpy\n", "adamw step (28 B/element)",
         1e3 * t_adam, adam_gbs, 100.0 * adam_gbs / copy_gbs);
  printf("%-34s %8.2f ms %8.2f GB/s  %5.1f %% of memcpy\n", "sgd momentum step (20 B/element)",
         1e3 * t_sgd, sgd_gbs, 100.0 * sgd_gbs / copy_gbs);
  if (p[0] != p[0]) printf("(diverged)\n"); /* keeps the passes observable */
  lamp_optim_close(adamw);
  lamp_optim_close(sgd);
  free(p), free(g), free(m), free(v), free(dst), free(buf);
  return 0;
}
