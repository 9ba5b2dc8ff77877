/*
** peak_bench: the arithmetic peak of this CPU's vector units, the ceiling every GFLOP/s figure of
** the other benchmarks is read against. Each kernel keeps 12 independent accumulators in
** registers (more than an FMA's latency times its pipes on any x86-64 core so far), reads no
** memory, and runs for about --ms milliseconds; first on one thread, then on one thread per
** online CPU at once (cores that share a power budget or a physical core run slower together).
**
**     fma512   _mm512_fmadd_ps     16 lanes, 2 FLOP each          (AVX-512F)
**     fma256   _mm256_fmadd_ps      8 lanes, 2 FLOP each          (AVX2 and FMA)
**     dpbf16   _mm512_dpbf16_ps    16 lanes, 2 products + 2 adds  (AVX512_BF16)
**
** A kernel the CPU lacks (base/cpu.h, LAMP_CPU_ISA caps it) prints "-".
**
**   peak_bench [--ms=T]     (default 300)
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_KERNELS 1
#else
#define HAVE_KERNELS 0
#endif

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One kernel: `iters` rounds of 12 instructions; returns a sum of its accumulators, which the
   caller keeps so that no round can be dropped. */
typedef float (*kernel_fn)(long iters);

#define ACC12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

#if HAVE_KERNELS
/* Each accumulator starts from its own value, so the compiler cannot merge the 12 chains into one,
   and the inputs pass through an empty asm each round, so it cannot fold them. */
#define FMA512_ZERO(k) __m512 a##k = _mm512_set1_ps((float)(k));
#define FMA512_STEP(k) a##k = _mm512_fmadd_ps(a##k, x, y);
#define FMA512_SUM(k) s = _mm512_add_ps(s, a##k);
__attribute__((target("avx512f"))) static float fma512(long iters) {
  __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-6f), s = _mm512_setzero_ps();
  ACC12(FMA512_ZERO)
  for (long i = 0; i < iters; i++) {
    __asm__ volatile("" : "+v"(x), "+v"(y));
    ACC12(FMA512_STEP)
  }
  ACC12(FMA512_SUM)
  float r = _mm512_reduce_add_ps(s);
  _mm256_zeroupper();
  return r;
}

#define FMA256_ZERO(k) __m256 a##k = _mm256_set1_ps((float)(k));
#define FMA256_STEP(k) a##k = _mm256_fmadd_ps(a##k, x, y);
#define FMA256_SUM(k) s = _mm256_add_ps(s, a##k);
__attribute__((target("avx2,fma"))) static float fma256(long iters) {
  __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-6f), s = _mm256_setzero_ps();
  ACC12(FMA256_ZERO)
  for (long i = 0; i < iters; i++) {
    __asm__ volatile("" : "+x"(x), "+x"(y));
    ACC12(FMA256_STEP)
  }
  ACC12(FMA256_SUM)
  float out[8];
  _mm256_storeu_ps(out, s);
  _mm256_zeroupper();
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

#define DOT_ZERO(k) __m512 a##k = _mm512_set1_ps((float)(k));
#define DOT_STEP(k) a##k = _mm512_dpbf16_ps(a##k, (__m512bh)x, (__m512bh)y);
#define DOT_SUM(k) s = _mm512_add_ps(s, a##k);
__attribute__((target("avx512f,avx512bf16"))) static float dpbf16(long iters) {
  /* every bf16 of x and y is 2^-10 (0x3a80): each pair adds 2^-19 to a lane */
  __m512i x = _mm512_set1_epi32(0x3a803a80), y = x;
  __m512 s = _mm512_setzero_ps();
  ACC12(DOT_ZERO)
  for (long i = 0; i < iters; i++) {
    __asm__ volatile("" : "+v"(x), "+v"(y));
    ACC12(DOT_STEP)
  }
  ACC12(DOT_SUM)
  float r = _mm512_reduce_add_ps(s);
  _mm256_zeroupper();
  return r;
}
#endif

typedef struct kernel {
  const char *name;
  kernel_fn run;
  double flop_per_iter; /* 12 instructions */
  int available;
} kernel;

typedef struct job {
  kernel_fn run;
  long iters;
  double seconds;
  float sum;
} job;

static void *run_job(void *arg) {
  job *j = arg;
  double t0 = now();
  j->sum = j->run(j->iters);
  j->seconds = now() - t0;
  return NULL;
}

/* Rounds for about `ms` milliseconds on one thread, from a short trial. */
static long calibrate(kernel_fn run, double ms) {
  long iters = 1 << 16;
  for (;;) {
    double t0 = now();
    volatile float keep = run(iters);
    double dt = now() - t0;
    (void)keep;
    if (dt > 0.02) return (long)((double)iters * ms / 1e3 / dt) + 1;
    iters *= 4;
  }
}

/* GFLOP/s of `threads` copies at once, each its own rounds; -1 when a thread cannot start. */
static double rate(const kernel *k, long iters, int threads, float *checksum) {
  job jobs[256];
  pthread_t ids[256];
  int started = 0;
  for (int t = 0; t < threads; t++) {
    jobs[t] = (job){k->run, iters, 0.0, 0.0f};
    if (pthread_create(&ids[t], NULL, run_job, &jobs[t]) != 0) break;
    started++;
  }
  double slowest = 0.0;
  for (int t = 0; t < started; t++) {
    pthread_join(ids[t], NULL);
    if (jobs[t].seconds > slowest) slowest = jobs[t].seconds;
    *checksum += jobs[t].sum;
  }
  if (started < threads) return -1.0;
  return k->flop_per_iter * (double)iters * threads / slowest / 1e9;
}

int main(int argc, char **argv) {
  double ms = 300.0;
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--ms=", 5) == 0 && atof(argv[i] + 5) > 0) ms = atof(argv[i] + 5);
    else {
      fprintf(stderr, "peak_bench: unknown argument %s (expected --ms=T, T > 0)\n", argv[i]);
      return 2;
    }
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = cpus < 1 ? 1 : cpus > 256 ? 256 : (int)cpus;
  kernel kernels[] = {
#if HAVE_KERNELS
      {"fma512 (fp32, AVX-512)", fma512, 12 * 16 * 2, lamp_cpu_has(LAMP_ISA_AVX512F)},
      {"fma256 (fp32, AVX2)", fma256, 12 * 8 * 2, lamp_cpu_has(LAMP_ISA_AVX2) && lamp_cpu_has(LAMP_ISA_FMA)},
      {"dpbf16 (bf16 pairs, AVX512_BF16)", dpbf16, 12 * 16 * 4, lamp_cpu_has(LAMP_ISA_AVX512BF16)},
#else
      {"(no x86-64 vector kernels in this build)", NULL, 0, 0},
#endif
  };
  float checksum = 0.0f;
  printf("%-34s %14s %14s %14s\n", "GFLOP/s", "1 thread", "per thread", "all threads");
  for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
    const kernel *k = &kernels[i];
    if (!k->available) {
      printf("%-34s %14s %14s %14s\n", k->name, "-", "-", "-");
      continue;
    }
    long iters = calibrate(k->run, ms);
    double one = rate(k, iters, 1, &checksum), all = rate(k, iters, threads, &checksum);
    if (one < 0 || all < 0) {
      fprintf(stderr, "peak_bench: could not start %d threads\n", threads);
      return 1;
    }
    printf("%-34s %14.1f %14.1f %14.1f\n", k->name, one, all / threads, all);
  }
  printf("(%d threads; checksum %g)\n", threads, (double)checksum);
  return 0;
}
