/*
** Direct convolution of the stride-1 "same" geometry, on AVX-512 or AVX2 with FMA.
**
** For the 3x3 / padding 1 convolutions of small CNNs the columns are nine shifted copies of the
** input, which im2col writes and the GEMM then packs again before its kernel reads them: for
** the thin products of 16 or 32 channels that traffic costs as much as the arithmetic. Here a
** kernel reads the input planes directly (AVX-512 implies the zero border, see block_lanes; AVX2
** reads a bordered copy, see block_stores): 16 output channels of 16 adjacent pixels are
** accumulated in registers over every (channel, tap), the weight of each broadcast from a
** [K][16-padded] transposed copy. The instruction set
** is chosen at run time: AVX-512 where the CPU has it, else AVX2 with FMA, whose 8 lanes and 16
** registers take the same blocks in smaller pieces; on a CPU with neither,
** lamp_cpu_conv_direct_supported says no and callers take im2col + GEMM.
**
** Numerically it is a GEMM over the same K terms, accumulated in order with fused
** multiply-adds: a reassociation of the same products, as any BLAS kernel does. Both
** instruction sets add the same products in the same order for every output: the same bits.
** A bf16 input where the pair kernel is chosen (have_bf16_dot: AMD's CPUs with AVX512_BF16) is the
** exception: its forward and weight gradient multiply the bf16 values in pairs with vdpbf16ps
** (direct_avx512_bf16, grad_avx512_bf16), the bits of that instruction's sums. The forward's
** weights are paired by the caller once per pass (pairing them per image cost the small ResNet in
** bf16 a tenth of its step on Zen 4).
*/
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "base/cpu.h"
#include "base/error.h"
#include "base/log.h"
#include "tensor/half.h"

#define DIRECT_BLOCK 16

/* 3x3, stride 1, padding 1, no dilation: the output planes are the input's size. */
static int direct_geometry(const lamp_conv_geom *g) {
  return g->kernel_h == 3 && g->kernel_w == 3 && g->stride_h == 1 && g->stride_w == 1 && g->dilation_h == 1 &&
         g->dilation_w == 1 && g->pad_h == 1 && g->pad_w == 1 && g->out_h == g->height && g->out_w == g->width &&
         g->channels > 0 && g->width <= 1024 && g->height <= 1024;
}

/* The weight gradient's workspaces: output channels padded to whole vectors, and the input
   planes with a zero border (see grad_cpu). */
static size_t padded_outputs(size_t n_out) { return (n_out + 15) / 16 * 16; }

/* The floats read past the bordered planes' end by the AVX2 forward's last pixel block. */
enum { bordered_slack = 32 };

static size_t bordered_floats(const lamp_conv_geom *g) {
  return (g->channels * (g->height + 2) * (g->width + 2) + 15) / 16 * 16;
}

/* The bf16 pair kernel's input channels in pairs (a last, odd channel paired with zero). */
static size_t channel_pairs(const lamp_conv_geom *g) { return (g->channels + 1) / 2; }

/* Block o0's weight pairs: wp[(c2 * 9 + tap) * 16 + o] from wt[(c * 9 + tap) * ldw + o0 + o]. */
static void pair_weights(uint32_t *wp, const float *wt, size_t ldw, size_t o0, const lamp_conv_geom *g) {
  for (size_t c2 = 0; c2 < channel_pairs(g); c2++)
    for (size_t tap = 0; tap < 9; tap++)
      for (size_t o = 0; o < DIRECT_BLOCK; o++) {
        uint32_t lo = lamp_f32_to_bf16(wt[(2 * c2 * 9 + tap) * ldw + o0 + o]); /* exact: bf16 values */
        uint32_t hi = 2 * c2 + 1 < g->channels ? lamp_f32_to_bf16(wt[((2 * c2 + 1) * 9 + tap) * ldw + o0 + o]) : 0u;
        wp[(c2 * 9 + tap) * DIRECT_BLOCK + o] = lo | hi << 16;
      }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

/*
** 16-bit input planes widened into work (fp32, [channels][h][w]), exactly as lamp_convert widens
** them; fp32 planes are read in place.
*/
static const float *fp32_planes(const void *x, lamp_dtype dtype, const lamp_conv_geom *g, float *work) {
  if (dtype == LAMP_F32) return x;
  size_t n = g->channels * g->height * g->width;
  if (dtype == LAMP_F16) lamp_f16_to_f32_n(work, x, n);
  else lamp_bf16_to_f32_n(work, x, n);
  return work;
}

/*
** The zero border of "padding 1" is never formed. Pixels are taken 16 at a time in raster order
** (flattened: a block may wrap onto the next row, so a 28 or 14 wide plane fills its lanes),
** and a tap that falls outside the image is a masked-off lane, which loads as 0 and is never
** accessed; a row of taps outside the image for every lane of a block is skipped. Either way
** the products are w * 0 = +-0, and adding +-0 to an accumulator that starts at +0 changes
** nothing (a sum of finite products is never -0): the sums are those of the zero-bordered
** input, bit for bit.
*/
static inline uint32_t low_lanes(size_t k) { return k >= 16 ? 0xffffu : (uint32_t)((1u << k) - 1u); }

/*
** For the n pixels from flattened index p0 of an h x w plane: rows[i], the lanes whose tap row
** (i = 0, 1, 2: above, same, below) lies inside the image, and cols[j], those whose tap column
** (left, same, right) does.
*/
static void block_lanes(uint32_t rows[3], uint32_t cols[3], size_t p0, size_t n, size_t w, size_t plane) {
  uint32_t lanes = low_lanes(n), first = 0, last = 0;
  size_t ox = p0 % w;
  for (size_t l = ox == 0 ? 0 : w - ox; l < n; l += w) first |= 1u << l; /* column 0 */
  for (size_t l = w - 1 - ox; l < n; l += w) last |= 1u << l;             /* column w - 1 */
  rows[0] = p0 < w ? lanes & ~low_lanes(w - p0) : lanes;
  rows[1] = lanes;
  rows[2] = p0 + w >= plane ? 0 : lanes & low_lanes(plane - w - p0);
  cols[0] = lanes & ~first;
  cols[1] = lanes;
  cols[2] = lanes & ~last;
}

/*
** A batch's planes stream from memory once per layer, and a kernel reads 16 to 32 of them at
** once, one plane per channel: more streams than the hardware prefetchers follow. Each kernel
** asks for the cache line it will read two lines ahead in each plane, which brought a batch's
** forward from about 80 to about 97 GFLOP/s and its weight gradient from about 76 to 88 on one
** Zen 4 core (hot in cache: 100 to 107 and 95 to 100). The address is formed as an integer: it
** may lie past the plane's end, where a prefetch is harmless but pointer arithmetic is not.
*/
enum { prefetch_ahead = 32 };

static inline void prefetch_floats(const float *base, size_t offset) {
  _mm_prefetch((const char *)((uintptr_t)base + offset * sizeof(float)), _MM_HINT_T0);
}

/* Tap (i, j) of pixel p0 in a plane w wide, x[p0 + (i - 1) * w + j - 1], as an address formed
   without pointer arithmetic outside the array (its lanes there are masked off, never accessed). */
static inline const float *tap_address(const float *plane, size_t p0, size_t w, size_t i, size_t j) {
  return (const float *)(const void *)((uintptr_t)plane + (p0 + i * w + j) * sizeof(float) -
                                       (w + 1) * sizeof(float));
}

/*
** 16 output channels (o0...) of the `n` pixels from flattened index p0: a step loads one pixel
** vector and issues 16 fused multiply-adds with the weights broadcast from memory. (Two pixel
** blocks sharing register-broadcast weights measured slower.) The accumulators are named one by
** one so that they stay in registers.
*/
#define DIRECT_ACC(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define DIRECT_ZERO(o) __m512 a##o = _mm512_setzero_ps();
#define DIRECT_FMA(o) a##o = _mm512_fmadd_ps(_mm512_set1_ps(wk[o]), v, a##o);
#define DIRECT_SAVE(o) acc[o] = a##o;

/* Outputs o0... (those below n_out) of the block's pixels, the lanes in `lanes`. */
__attribute__((target("avx512f"))) static inline void store_block(float *out, size_t ld_out, size_t o0, size_t n_out,
                                                                 size_t p0, uint32_t lanes,
                                                                 const __m512 acc[DIRECT_BLOCK]) {
  size_t valid = n_out - o0 < DIRECT_BLOCK ? n_out - o0 : DIRECT_BLOCK;
  float *dst = out + o0 * ld_out + p0;
  for (size_t o = 0; o < valid; o++) _mm512_mask_storeu_ps(dst + o * ld_out, (__mmask16)lanes, acc[o]);
}

__attribute__((target("avx512f"))) static void direct_block(float *out, size_t ld_out, const float *x,
                                                            const float *wt, size_t ldw, size_t o0, size_t n_out,
                                                            size_t p0, size_t n, const lamp_conv_geom *g) {
  size_t w = g->width, plane = g->height * w;
  uint32_t rows[3], cols[3];
  block_lanes(rows, cols, p0, n, w, plane);
  DIRECT_ACC(DIRECT_ZERO)
  const float *wk = wt + o0;
  for (size_t c = 0; c < g->channels; c++)
    for (size_t i = 0; i < 3; i++) { /* the three taps of a row unrolled */
      if (rows[i] == 0) { /* a row of the zero border for every pixel: nothing to add */
        wk += 3 * ldw;
        continue;
      }
      const float *xc = x + c * plane;
      if (i == 0) prefetch_floats(xc, p0 + w + prefetch_ahead); /* past the row below's taps */
      __m512 v = _mm512_maskz_loadu_ps((__mmask16)(rows[i] & cols[0]), tap_address(xc, p0, w, i, 0));
      DIRECT_ACC(DIRECT_FMA)
      wk += ldw;
      v = _mm512_maskz_loadu_ps((__mmask16)(rows[i] & cols[1]), tap_address(xc, p0, w, i, 1));
      DIRECT_ACC(DIRECT_FMA)
      wk += ldw;
      v = _mm512_maskz_loadu_ps((__mmask16)(rows[i] & cols[2]), tap_address(xc, p0, w, i, 2));
      DIRECT_ACC(DIRECT_FMA)
      wk += ldw;
    }
  __m512 acc[DIRECT_BLOCK];
  DIRECT_ACC(DIRECT_SAVE)
  store_block(out, ld_out, o0, n_out, p0, cols[1], acc);
}

/* Both kernels leave with vzeroupper: the SSE code after them would run slowly behind dirty
   upper register halves. */
__attribute__((target("avx512f"))) static void direct_avx512(float *out, size_t ld_out, const void *x,
                                                             lamp_dtype x_dtype, const float *wt, size_t ldw,
                                                             size_t n_out, const lamp_conv_geom *g, float *work) {
  const float *planes = fp32_planes(x, x_dtype, g, work);
  size_t plane = g->out_h * g->out_w;
  for (size_t o0 = 0; o0 < n_out; o0 += DIRECT_BLOCK)
    for (size_t p0 = 0; p0 < plane; p0 += DIRECT_BLOCK)
      direct_block(out, ld_out, planes, wt, ldw, o0, n_out, p0, lamp_cpu_min(DIRECT_BLOCK, plane - p0), g);
  _mm256_zeroupper();
}

/*
** bf16 planes on a CPU with AVX512_BF16: vdpbf16ps multiplies pairs of bf16 values and adds both
** products into an fp32 lane, twice the fp32 FMA's products per instruction. The pairs are of
** input channels: the planes are interleaved into [channels / 2][plane] 32-bit pairs (even
** channel low, a missing odd channel zero), and for each output the weights of the two channels
** at one tap make the broadcast pair, gathered per block of 16 outputs into
** [channels / 2][9][16]. The products are exact in fp32 and each pair is added into the sum as
** the instruction defines it (round to nearest even, denormal inputs read as zero, denormal
** results flushed): the sums differ from the fp32 kernel's order, as a bf16 GEMM's do, and are
** the same for every run on the CPU. wt must hold bf16 values (the compute dtype's operands).
*/
#define BF16_DOT(o) a##o = _mm512_dpbf16_ps(a##o, (__m512bh)v, (__m512bh)_mm512_set1_epi32((int)wk[o]));

__attribute__((target("avx512f"))) static void pair_planes(uint32_t *xi, const uint16_t *x, const lamp_conv_geom *g) {
  size_t plane = g->height * g->width;
  for (size_t c2 = 0; c2 < channel_pairs(g); c2++) {
    const uint16_t *lo = x + 2 * c2 * plane, *hi = 2 * c2 + 1 < g->channels ? lo + plane : NULL;
    uint32_t *dst = xi + c2 * plane;
    size_t p = 0;
    if (hi != NULL) {
      for (; p + 16 <= plane; p += 16) {
        __m512i l = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(lo + p)));
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(hi + p)));
        _mm512_storeu_si512((void *)(dst + p), _mm512_or_si512(l, _mm512_slli_epi32(h, 16)));
      }
      for (; p < plane; p++) dst[p] = lo[p] | (uint32_t)hi[p] << 16;
    } else {
      for (; p < plane; p++) dst[p] = lo[p];
    }
  }
}

/* direct_block on channel pairs: the same lanes, masks and stores. */
__attribute__((target("avx512f,avx512bf16"))) static void direct_block_bf16(float *out, size_t ld_out,
                                                                           const uint32_t *xi, const uint32_t *wp,
                                                                           size_t o0, size_t n_out, size_t p0,
                                                                           size_t n, const lamp_conv_geom *g) {
  size_t w = g->width, plane = g->height * w;
  uint32_t rows[3], cols[3];
  block_lanes(rows, cols, p0, n, w, plane);
  DIRECT_ACC(DIRECT_ZERO)
  const uint32_t *wk = wp;
  for (size_t c2 = 0; c2 < channel_pairs(g); c2++)
    for (size_t i = 0; i < 3; i++) {
      if (rows[i] == 0) {
        wk += 3 * DIRECT_BLOCK;
        continue;
      }
      const float *xc = (const float *)(const void *)(xi + c2 * plane);
      if (i == 0) prefetch_floats(xc, p0 + w + prefetch_ahead);
      for (size_t j = 0; j < 3; j++) {
        __m512i v = _mm512_maskz_loadu_epi32((__mmask16)(rows[i] & cols[j]), tap_address(xc, p0, w, i, j));
        DIRECT_ACC(BF16_DOT)
        wk += DIRECT_BLOCK;
      }
    }
  __m512 acc[DIRECT_BLOCK];
  DIRECT_ACC(DIRECT_SAVE)
  store_block(out, ld_out, o0, n_out, p0, cols[1], acc);
}

/* wp: every block's weight pairs (lamp_cpu_conv_direct_pair_weights); work: the paired planes. */
__attribute__((target("avx512f,avx512bf16"))) static void direct_avx512_bf16(float *out, size_t ld_out,
                                                                            const uint16_t *x, const uint32_t *wp,
                                                                            size_t n_out, const lamp_conv_geom *g,
                                                                            float *work) {
  size_t plane = g->out_h * g->out_w, block_pairs = channel_pairs(g) * 9 * DIRECT_BLOCK;
  uint32_t *xi = (uint32_t *)(void *)work;
  pair_planes(xi, x, g);
  for (size_t o0 = 0; o0 < n_out; o0 += DIRECT_BLOCK)
    for (size_t p0 = 0; p0 < plane; p0 += DIRECT_BLOCK)
      direct_block_bf16(out, ld_out, xi, wp + o0 / DIRECT_BLOCK * block_pairs, o0, n_out, p0,
                        lamp_cpu_min(DIRECT_BLOCK, plane - p0), g);
  _mm256_zeroupper();
}

/*
** The weight gradient, gw[o][r] = sum_p dy[o][p] * col[r][p] (r = (c * 3 + i) * 3 + j), with the
** output channels in the vector lanes: dy is transposed to [pixel][16-padded outputs] and the
** input given a zero border, so that for each pixel one vector of dy meets, by broadcast, the
** 9 taps of two input channels at once (18 accumulators; the direct forward's shape, which runs
** near the FMA peak, where lanes along the pixels wasted masked tails and split loads). The
** sums stay in the accumulator buffer acc[r][16-padded outputs] across a worker's images
** (pixels in raster order, images in turn) and are transposed into gw once per batch.
*/
/* The 9 taps (i, j) of one input channel, read through p, into accumulators k (0-8, 9-17). */
#define GRAD_TAPS_0(X, p) X(0, p, 0, 0) X(1, p, 0, 1) X(2, p, 0, 2) X(3, p, 1, 0) X(4, p, 1, 1) \
  X(5, p, 1, 2) X(6, p, 2, 0) X(7, p, 2, 1) X(8, p, 2, 2)
#define GRAD_TAPS_9(X, p) X(9, p, 0, 0) X(10, p, 0, 1) X(11, p, 0, 2) X(12, p, 1, 0) X(13, p, 1, 1) \
  X(14, p, 1, 2) X(15, p, 2, 0) X(16, p, 2, 1) X(17, p, 2, 2)
#define GRAD_ZERO(k, p, i, j) __m512 a##k = _mm512_setzero_ps();
#define GRAD_FMA(k, p, i, j) a##k = _mm512_fmadd_ps(d, _mm512_set1_ps(p[(i) * wp + (j)]), a##k);
#define GRAD_STORE(k, p, i, j) grad_store(acc + (r0 + (k)) * o16, a##k, accumulate);

/* Hides where p points from the optimiser: neighbouring pixels share taps, and GCC would keep them
   in registers from one pixel to the next, shuffling and spilling them, where a broadcast straight
   from memory into each FMA is what the load ports can feed at full rate. */
#define OPAQUE(p) __asm__("" : "+r"(p))

__attribute__((target("avx512f"))) static inline void grad_store(float *dst, __m512 v, int accumulate) {
  if (accumulate) v = _mm512_add_ps(_mm512_loadu_ps(dst), v);
  _mm512_storeu_ps(dst, v);
}

/* Rows r0 .. r0 + 17 (input channels c, c + 1) of output block ob: xp the bordered planes. */
__attribute__((target("avx512f"))) static void grad_two_channels(float *acc, size_t o16, size_t r0, const float *xp,
                                                                 const float *dyt, const lamp_conv_geom *g,
                                                                 int accumulate) {
  size_t h = g->height, w = g->width, wp = w + 2, plane_p = (h + 2) * wp;
  GRAD_TAPS_0(GRAD_ZERO, p0)
  GRAD_TAPS_9(GRAD_ZERO, p1)
  for (size_t oy = 0; oy < h; oy++)
    for (size_t ox = 0; ox < w; ox++) {
      __m512 d = _mm512_loadu_ps(dyt + (oy * w + ox) * o16);
      const float *p0 = xp + oy * wp + ox, *p1 = p0 + plane_p;
      OPAQUE(p0);
      OPAQUE(p1);
      GRAD_TAPS_0(GRAD_FMA, p0)
      GRAD_TAPS_9(GRAD_FMA, p1)
    }
  GRAD_TAPS_0(GRAD_STORE, p0)
  GRAD_TAPS_9(GRAD_STORE, p1)
}

/* The same for a last, odd input channel: rows r0 .. r0 + 8. */
__attribute__((target("avx512f"))) static void grad_one_channel(float *acc, size_t o16, size_t r0, const float *xp,
                                                                const float *dyt, const lamp_conv_geom *g,
                                                                int accumulate) {
  size_t h = g->height, w = g->width, wp = w + 2;
  GRAD_TAPS_0(GRAD_ZERO, p0)
  for (size_t oy = 0; oy < h; oy++)
    for (size_t ox = 0; ox < w; ox++) {
      __m512 d = _mm512_loadu_ps(dyt + (oy * w + ox) * o16);
      const float *p0 = xp + oy * wp + ox;
      OPAQUE(p0);
      GRAD_TAPS_0(GRAD_FMA, p0)
    }
  GRAD_TAPS_0(GRAD_STORE, p0)
}

/* x's planes (widened where 16-bit, exactly as lamp_convert does) with a zero border: [c][h+2][w+2]. */
static void bordered_planes(float *xp, const void *x, lamp_dtype dtype, const lamp_conv_geom *g) {
  size_t h = g->height, w = g->width, wp = w + 2, plane_p = (h + 2) * wp;
  for (size_t c = 0; c < g->channels; c++) {
    float *dst = xp + c * plane_p;
    memset(dst, 0, wp * sizeof *dst);
    memset(dst + (h + 1) * wp, 0, wp * sizeof *dst);
    for (size_t y = 0; y < h; y++) {
      float *row = dst + (y + 1) * wp;
      size_t first = (c * h + y) * w;
      row[0] = row[w + 1] = 0.0f;
      if (dtype == LAMP_F32) memcpy(row + 1, (const float *)x + first, w * sizeof *row);
      else if (dtype == LAMP_F16) lamp_f16_to_f32_n(row + 1, (const uint16_t *)x + first, w);
      else lamp_bf16_to_f32_n(row + 1, (const uint16_t *)x + first, w);
    }
  }
}

/* dy [n_out][plane] as [plane][o16], the outputs past n_out zero: 16 outputs of a pixel per
   gather (direct_geometry keeps 15 planes' offsets within int32). */
__attribute__((target("avx512f"))) static void transpose_dy_avx512(float *dyt, const float *dy, size_t n_out,
                                                                   size_t o16, size_t plane) {
  const __m512i index = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)plane));
  for (size_t ob = 0; ob < o16; ob += 16) {
    size_t n = lamp_cpu_min(16, n_out - ob);
    __mmask16 valid = (__mmask16)((1u << n) - 1u);
    const float *src = dy + ob * plane;
    for (size_t p = 0; p < plane; p++) {
      if (p % 16 == 0)
        for (size_t o = 0; o < n; o++) prefetch_floats(src + o * plane, p + prefetch_ahead);
      _mm512_storeu_ps(dyt + p * o16 + ob,
                       _mm512_mask_i32gather_ps(_mm512_setzero_ps(), valid, index, src + p, sizeof(float)));
    }
  }
}

__attribute__((target("avx512f"))) static void grad_avx512(float *acc, const void *x, lamp_dtype x_dtype,
                                                           const float *dy, size_t n_out, const lamp_conv_geom *g,
                                                           float *work, int accumulate) {
  size_t o16 = padded_outputs(n_out), plane = g->height * g->width, plane_p = (g->height + 2) * (g->width + 2);
  float *xp = work, *dyt = work + bordered_floats(g);
  bordered_planes(xp, x, x_dtype, g);
  transpose_dy_avx512(dyt, dy, n_out, o16, plane);
  for (size_t ob = 0; ob < o16; ob += 16) {
    size_t c = 0;
    for (; c + 2 <= g->channels; c += 2)
      grad_two_channels(acc + ob, o16, c * 9, xp + c * plane_p, dyt + ob, g, accumulate);
    if (c < g->channels) grad_one_channel(acc + ob, o16, c * 9, xp + c * plane_p, dyt + ob, g, accumulate);
  }
  _mm256_zeroupper();
}

/*
** The weight gradient of bf16 x and dy on the pair kernel: the sum over pixels taken two at a
** time, the two of a row's pixel pair (2k, 2k + 1; a last pixel of an odd row paired with a zero
** dy) in one vdpbf16ps. dy is laid out as [row][pair][16-padded outputs] 32-bit pairs, the first
** pixel low; x as bf16 planes with a zero border, in which a tap's two values for the pair are
** adjacent, one 32-bit broadcast. The phantom pixel past an odd row reads x's real last column or
** the border (and, in the last row, one pair past the planes: bordered_slack16, zero) against a
** zero dy. The accumulators are those of grad_two_channels, in the same layout.
*/
enum { bordered_slack16 = 2 };

static size_t row_pairs(const lamp_conv_geom *g) { return (g->width + 1) / 2; }

static size_t bordered16_floats(const lamp_conv_geom *g) {
  return ((g->channels * (g->height + 2) * (g->width + 2) + bordered_slack16 + 1) / 2 + 15) / 16 * 16;
}

/* x's bf16 planes with a zero border, [c][h+2][w+2], and the slack after them zero. */
static void bordered_planes16(uint16_t *xp, const uint16_t *x, const lamp_conv_geom *g) {
  size_t h = g->height, w = g->width, wp = w + 2, plane_p = (h + 2) * wp;
  for (size_t c = 0; c < g->channels; c++) {
    uint16_t *dst = xp + c * plane_p;
    memset(dst, 0, wp * sizeof *dst);
    memset(dst + (h + 1) * wp, 0, wp * sizeof *dst);
    for (size_t y = 0; y < h; y++) {
      uint16_t *row = dst + (y + 1) * wp;
      row[0] = row[w + 1] = 0;
      memcpy(row + 1, x + (c * h + y) * w, w * sizeof *row);
    }
  }
  memset(xp + g->channels * plane_p, 0, bordered_slack16 * sizeof *xp);
}

/* dy [n_out][plane] bf16 as [h][row_pairs][o16] pairs, outputs past n_out and phantom pixels zero. */
static void pair_dy(uint32_t *dyt, const uint16_t *dy, size_t n_out, size_t o16, const lamp_conv_geom *g) {
  size_t w = g->width, plane = g->height * w, pairs = row_pairs(g);
  for (size_t y = 0; y < g->height; y++)
    for (size_t k = 0; k < pairs; k++) {
      uint32_t *dst = dyt + (y * pairs + k) * o16;
      size_t p = y * w + 2 * k;
      int second = 2 * k + 1 < w;
      for (size_t o = 0; o < o16; o++)
        dst[o] = o < n_out ? dy[o * plane + p] | (second ? (uint32_t)dy[o * plane + p + 1] << 16 : 0u) : 0u;
    }
}

static inline uint32_t load_pair(const uint16_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

#define GRAD16_ZERO(k, p, i, j) __m512 a##k = _mm512_setzero_ps();
#define GRAD16_DOT(k, p, i, j) \
  a##k = _mm512_dpbf16_ps(a##k, (__m512bh)d, (__m512bh)_mm512_set1_epi32((int)load_pair(p + (i) * wp + (j))));

/* Rows r0 .. r0 + 17 (input channels c, c + 1): grad_two_channels on pixel pairs. */
__attribute__((target("avx512f,avx512bf16"))) static void grad_two_channels_bf16(
    float *acc, size_t o16, size_t r0, const uint16_t *xp, const uint32_t *dyt, const lamp_conv_geom *g,
    int accumulate) {
  size_t h = g->height, wp = g->width + 2, plane_p = (h + 2) * wp, pairs = row_pairs(g);
  GRAD_TAPS_0(GRAD16_ZERO, p0)
  GRAD_TAPS_9(GRAD16_ZERO, p1)
  for (size_t oy = 0; oy < h; oy++)
    for (size_t k = 0; k < pairs; k++) {
      __m512i d = _mm512_loadu_si512((const void *)(dyt + (oy * pairs + k) * o16));
      const uint16_t *p0 = xp + oy * wp + 2 * k, *p1 = p0 + plane_p;
      OPAQUE(p0);
      OPAQUE(p1);
      GRAD_TAPS_0(GRAD16_DOT, p0)
      GRAD_TAPS_9(GRAD16_DOT, p1)
    }
  GRAD_TAPS_0(GRAD_STORE, p0)
  GRAD_TAPS_9(GRAD_STORE, p1)
}

/* The same for a last, odd input channel: rows r0 .. r0 + 8. */
__attribute__((target("avx512f,avx512bf16"))) static void grad_one_channel_bf16(float *acc, size_t o16, size_t r0,
                                                                               const uint16_t *xp,
                                                                               const uint32_t *dyt,
                                                                               const lamp_conv_geom *g,
                                                                               int accumulate) {
  size_t h = g->height, wp = g->width + 2, pairs = row_pairs(g);
  GRAD_TAPS_0(GRAD16_ZERO, p0)
  for (size_t oy = 0; oy < h; oy++)
    for (size_t k = 0; k < pairs; k++) {
      __m512i d = _mm512_loadu_si512((const void *)(dyt + (oy * pairs + k) * o16));
      const uint16_t *p0 = xp + oy * wp + 2 * k;
      OPAQUE(p0);
      GRAD_TAPS_0(GRAD16_DOT, p0)
    }
  GRAD_TAPS_0(GRAD_STORE, p0)
}

/* work: the bordered bf16 planes, then dy's pairs. */
__attribute__((target("avx512f,avx512bf16"))) static void grad_avx512_bf16(float *acc, const uint16_t *x,
                                                                          const uint16_t *dy, size_t n_out,
                                                                          const lamp_conv_geom *g, float *work,
                                                                          int accumulate) {
  size_t o16 = padded_outputs(n_out), plane_p = (g->height + 2) * (g->width + 2);
  uint16_t *xp = (uint16_t *)(void *)work;
  uint32_t *dyt = (uint32_t *)(void *)(work + bordered16_floats(g));
  bordered_planes16(xp, x, g);
  pair_dy(dyt, dy, n_out, o16, g);
  for (size_t ob = 0; ob < o16; ob += 16) {
    size_t c = 0;
    for (; c + 2 <= g->channels; c += 2)
      grad_two_channels_bf16(acc + ob, o16, c * 9, xp + c * plane_p, dyt + ob, g, accumulate);
    if (c < g->channels) grad_one_channel_bf16(acc + ob, o16, c * 9, xp + c * plane_p, dyt + ob, g, accumulate);
  }
  _mm256_zeroupper();
}

/* ---- AVX2 with FMA: 8 lanes, 16 registers ---------------------------------------------------- */

/* The lanes of an 8-bit mask as maskstore's vector (all ones where the bit is set). */
__attribute__((target("avx2"))) static inline __m256i lane_vector(uint32_t bits) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), bit), bit);
}

/*
** AVX2's masked loads cost a quarter of the forward's time, so it reads the input with a zero
** border (bordered_planes, rows w + 2 apart) and plain loads instead. Its blocks are 16 pixels of
** that pitch: a tap is one contiguous load for every lane, and the two border columns of each
** row are lanes whose results are dropped. Stores therefore go by segments, the runs of a
** block's lanes that are pixels of one row; a block of a plane w + 2 >= 16 wide holds at most two.
*/
#define SEGMENTS_MAX 8 /* runs in 16 lanes: a row (w + 2 >= 3) and its border take 3 lanes */

typedef struct block_stores {
  size_t count;
  ptrdiff_t shift[SEGMENTS_MAX]; /* where lane 0 of a segment's vector lands in an output plane */
  __m256i mask[SEGMENTS_MAX][2]; /* its lanes, in the two vectors of 8 */
  int half[SEGMENTS_MAX][2];     /* whether each vector has any */
} block_stores;

/* The segments of the block at pitch index q0 (pitch wp = w + 2) of an h x w plane. */
__attribute__((target("avx2"))) static void block_stores_of(block_stores *b, size_t q0, size_t w, size_t h) {
  size_t wp = w + 2;
  b->count = 0;
  for (size_t a = 0; a < DIRECT_BLOCK;) {
    size_t y = (q0 + a) / wp, x = (q0 + a) % wp;
    if (y >= h) break;
    if (x >= w) { /* a border lane */
      a++;
      continue;
    }
    size_t run = lamp_cpu_min(w - x, DIRECT_BLOCK - a);
    uint32_t lanes = ((1u << run) - 1u) << a;
    size_t k = b->count++;
    b->shift[k] = (ptrdiff_t)(y * w + x) - (ptrdiff_t)a;
    for (size_t half = 0; half < 2; half++) {
      uint32_t bits = lanes >> (8 * half) & 0xffu;
      b->mask[k][half] = lane_vector(bits);
      b->half[k][half] = bits != 0;
    }
    a += run;
  }
}

/* Lanes 8 * half ... of v into the plane at `plane` (a float address formed without pointer
   arithmetic outside the array: its lanes there are masked off, never accessed). */
__attribute__((target("avx2"))) static inline void store_segments(float *plane, const block_stores *b, size_t half,
                                                                  __m256 v) {
  for (size_t k = 0; k < b->count; k++)
    if (b->half[k][half])
      _mm256_maskstore_ps(
          (float *)(void *)((uintptr_t)plane + (uintptr_t)(b->shift[k] + (ptrdiff_t)(8 * half)) * sizeof(float)),
          b->mask[k][half], v);
}

/*
** 16 pixels as two vectors of 8 against `count` (6 or 4) output channels from o: 12
** accumulators, the two pixel vectors and a broadcast hold 15 of the 16 registers, and each
** step's 8 loads feed 12 fused multiply-adds. The 16 outputs of a weight block go as 6, 6, 4.
** Inlined with count constant, so that the loops over the outputs unroll and the accumulator
** arrays live in registers (which a variable index would put in memory). Taps in the border
** add w * 0 = +-0 where the AVX-512 kernel adds nothing: the same sums, bit for bit.
*/
__attribute__((target("avx2,fma"), always_inline)) static inline void
direct_outputs_avx2(float *out, size_t ld_out, const float *xq, size_t plane_p, size_t wp, const float *wk, size_t ldw,
                    const size_t count, size_t valid, const block_stores *b, size_t channels) {
  __m256 lo[6], hi[6];
#pragma GCC unroll 6
  for (size_t o = 0; o < count; o++) lo[o] = hi[o] = _mm256_setzero_ps();
  for (size_t c = 0; c < channels; c++) {
    const float *xc = xq + c * plane_p;
    for (size_t i = 0; i < 3; i++)
      for (size_t j = 0; j < 3; j++) {
        __m256 vlo = _mm256_loadu_ps(xc + i * wp + j), vhi = _mm256_loadu_ps(xc + i * wp + j + 8);
#pragma GCC unroll 6
        for (size_t o = 0; o < count; o++) {
          __m256 w = _mm256_broadcast_ss(wk + o);
          lo[o] = _mm256_fmadd_ps(w, vlo, lo[o]);
          hi[o] = _mm256_fmadd_ps(w, vhi, hi[o]);
        }
        wk += ldw;
      }
  }
#pragma GCC unroll 6
  for (size_t o = 0; o < count; o++) {
    if (o >= valid) break;
    store_segments(out + o * ld_out, b, 0, lo[o]);
    store_segments(out + o * ld_out, b, 1, hi[o]);
  }
}

/* Pixel blocks outer, so that a block's input stays in L1 for every output block. The last
   block's taps reach up to 17 floats past the bordered planes: bordered_slack, zeroed. */
__attribute__((target("avx2,fma"))) static void direct_avx2(float *out, size_t ld_out, const void *x,
                                                            lamp_dtype x_dtype, const float *wt, size_t ldw,
                                                            size_t n_out, const lamp_conv_geom *g, float *work) {
  static const size_t group_at[3] = {0, 6, 12}, group_size[3] = {6, 6, 4};
  size_t h = g->height, w = g->width, wp = w + 2, plane_p = (h + 2) * wp, pitched = h * wp;
  bordered_planes(work, x, x_dtype, g);
  memset(work + g->channels * plane_p, 0, bordered_slack * sizeof *work);
  for (size_t q0 = 0; q0 < pitched; q0 += DIRECT_BLOCK) {
    block_stores b;
    block_stores_of(&b, q0, w, h);
    for (size_t o0 = 0; o0 < n_out; o0 += DIRECT_BLOCK)
      for (size_t k = 0; k < 3 && o0 + group_at[k] < n_out; k++) {
        size_t o = o0 + group_at[k], valid = lamp_cpu_min(group_size[k], n_out - o);
        float *dst = out + o * ld_out;
        if (group_size[k] == 6)
          direct_outputs_avx2(dst, ld_out, work + q0, plane_p, wp, wt + o, ldw, 6, valid, &b, g->channels);
        else direct_outputs_avx2(dst, ld_out, work + q0, plane_p, wp, wt + o, ldw, 4, valid, &b, g->channels);
      }
  }
  _mm256_zeroupper();
}

__attribute__((target("avx2"))) static inline void grad_store_avx2(float *dst, __m256 v, int accumulate) {
  if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(dst), v);
  _mm256_storeu_ps(dst, v);
}

/*
** Rows r0 .. r0 + count - 1 (count 6 or 3; r = (c * 3 + i) * 3 + j, so a group may span two input
** channels) of 16 outputs: 12 accumulators, and per pixel two vectors of dy and 6 broadcast taps,
** 8 loads for 12 fused multiply-adds. The same sums in the same order as the AVX-512 lanes.
** Inlined with count constant, as direct_outputs_avx2.
*/
__attribute__((target("avx2,fma"), always_inline)) static inline void grad_rows_avx2(
    float *acc, size_t o16, size_t r0, const size_t count, const float *xp, const float *dyt, const lamp_conv_geom *g,
    int accumulate) {
  size_t h = g->height, w = g->width, wp = w + 2, plane_p = (h + 2) * wp;
  size_t at[6];
  __m256 lo[6], hi[6];
#pragma GCC unroll 6
  for (size_t k = 0; k < count; k++) {
    size_t r = r0 + k, c = r / 9, i = r / 3 % 3, j = r % 3;
    at[k] = c * plane_p + i * wp + j;
    lo[k] = hi[k] = _mm256_setzero_ps();
  }
  for (size_t oy = 0; oy < h; oy++)
    for (size_t ox = 0; ox < w; ox++) {
      const float *d = dyt + (oy * w + ox) * o16, *p = xp + oy * wp + ox;
      __m256 dlo = _mm256_loadu_ps(d), dhi = _mm256_loadu_ps(d + 8);
#pragma GCC unroll 6
      for (size_t k = 0; k < count; k++) {
        __m256 t = _mm256_broadcast_ss(p + at[k]);
        lo[k] = _mm256_fmadd_ps(dlo, t, lo[k]);
        hi[k] = _mm256_fmadd_ps(dhi, t, hi[k]);
      }
    }
#pragma GCC unroll 6
  for (size_t k = 0; k < count; k++) {
    grad_store_avx2(acc + (r0 + k) * o16, lo[k], accumulate);
    grad_store_avx2(acc + (r0 + k) * o16 + 8, hi[k], accumulate);
  }
}

/* dy [n_out][plane] as [plane][o16], the outputs past n_out zero. */
static void transpose_dy_plain(float *dyt, const float *dy, size_t n_out, size_t o16, size_t plane) {
  for (size_t o = 0; o < o16; o++)
    for (size_t p = 0; p < plane; p++) dyt[p * o16 + o] = o < n_out ? dy[o * plane + p] : 0.0f;
}

__attribute__((target("avx2,fma"))) static void grad_avx2(float *acc, const void *x, lamp_dtype x_dtype,
                                                          const float *dy, size_t n_out, const lamp_conv_geom *g,
                                                          float *work, int accumulate) {
  size_t o16 = padded_outputs(n_out), plane = g->height * g->width;
  float *xp = work, *dyt = work + bordered_floats(g);
  bordered_planes(xp, x, x_dtype, g);
  transpose_dy_plain(dyt, dy, n_out, o16, plane);
  size_t rows = g->channels * 9; /* a multiple of 3: groups of 6, the last one perhaps of 3 */
  for (size_t ob = 0; ob < o16; ob += 16)
    for (size_t r0 = 0; r0 < rows; r0 += 6) {
      if (rows - r0 >= 6) grad_rows_avx2(acc + ob, o16, r0, 6, xp, dyt + ob, g, accumulate);
      else grad_rows_avx2(acc + ob, o16, r0, 3, xp, dyt + ob, g, accumulate);
    }
  _mm256_zeroupper();
}

/* ---- the instruction set ---------------------------------------------------------------------- */

static int have_avx512(void) { return lamp_cpu_has(LAMP_ISA_AVX512F); }
static int have_avx2(void) { return lamp_cpu_has(LAMP_ISA_AVX2) && lamp_cpu_has(LAMP_ISA_FMA); }

/*
** The pair kernel does two products per lane and instruction, which pays only where vdpbf16ps
** issues about as often as an FMA. It does on AMD's Zen 4 (one 512-bit FMA or vdpbf16ps a cycle:
** the ResNet's layers ran 1.4 to 1.8 times the widening kernel's speed). An Intel Xeon with AMX
** (Sapphire Rapids' generation) issues two FMAs a cycle but one vdpbf16ps every two
** (register-only loops: 16 products a cycle against 32), and the small ResNet in bf16 ran at 0.73
** times the widening kernels' speed. So pairs are the default on AMD's CPUs only;
** LAMP_CONV_BF16=pairs|widen overrides, pairs only where the CPU has AVX512_BF16.
*/
static pthread_once_t pairs_once = PTHREAD_ONCE_INIT;
static int pairs_chosen;

static int can_pair(void) { return have_avx512() && lamp_cpu_has(LAMP_ISA_AVX512BF16); }

static void choose_pairs(void) {
  int can = can_pair();
  const char *forced = getenv("LAMP_CONV_BF16");
  pairs_chosen = can && lamp_cpu_vendor() == LAMP_VENDOR_AMD;
  if (forced == NULL || forced[0] == '\0' || strcmp(forced, "auto") == 0 || strcmp(forced, "dnnl") == 0) return;
  if (strcmp(forced, "widen") == 0) {
    pairs_chosen = 0;
  } else if (strcmp(forced, "pairs") == 0) {
    pairs_chosen = can;
    if (!can) lamp_log(LAMP_LOG_WARN, NULL, "LAMP_CONV_BF16=pairs: this CPU has no AVX512_BF16; widening bf16");
  } else {
    lamp_log(LAMP_LOG_WARN, NULL, "LAMP_CONV_BF16: expected auto, dnnl, pairs or widen, found '%s'; using auto", forced);
  }
}

static int have_bf16_dot(void) {
  pthread_once(&pairs_once, choose_pairs);
  return pairs_chosen;
}

static void direct_cpu(float *out, size_t ld_out, const void *x, lamp_dtype x_dtype, const float *wt, size_t ldw,
                       size_t n_out, const lamp_conv_geom *g, float *work) {
  if (have_avx512()) direct_avx512(out, ld_out, x, x_dtype, wt, ldw, n_out, g, work);
  else direct_avx2(out, ld_out, x, x_dtype, wt, ldw, n_out, g, work);
}

static void pairs_cpu(float *out, size_t ld_out, const uint16_t *x, const uint32_t *wp, size_t n_out,
                      const lamp_conv_geom *g, float *work) {
  direct_avx512_bf16(out, ld_out, x, wp, n_out, g, work);
}

static void pairs_grad_cpu(float *acc, const uint16_t *x, const uint16_t *dy, size_t n_out,
                           const lamp_conv_geom *g, float *work, int accumulate) {
  grad_avx512_bf16(acc, x, dy, n_out, g, work, accumulate);
}

static void grad_cpu(float *acc, const void *x, lamp_dtype x_dtype, const float *dy, size_t n_out,
                     const lamp_conv_geom *g, float *work, int accumulate) {
  if (have_avx512()) grad_avx512(acc, x, x_dtype, dy, n_out, g, work, accumulate);
  else grad_avx2(acc, x, x_dtype, dy, n_out, g, work, accumulate);
}

#else
static int have_avx512(void) { return 0; }
static int have_avx2(void) { return 0; }
static int have_bf16_dot(void) { return 0; }
static int can_pair(void) { return 0; }
static void pairs_grad_cpu(float *acc, const uint16_t *x, const uint16_t *dy, size_t n_out,
                           const lamp_conv_geom *g, float *work, int accumulate) {
  (void)acc, (void)x, (void)dy, (void)n_out, (void)g, (void)work, (void)accumulate;
}
static void pairs_cpu(float *out, size_t ld_out, const uint16_t *x, const uint32_t *wp, size_t n_out,
                      const lamp_conv_geom *g, float *work) {
  (void)out, (void)ld_out, (void)x, (void)wp, (void)n_out, (void)g, (void)work;
}
static void grad_cpu(float *acc, const void *x, lamp_dtype x_dtype, const float *dy, size_t n_out,
                     const lamp_conv_geom *g, float *work, int accumulate) {
  (void)acc, (void)x, (void)x_dtype, (void)dy, (void)n_out, (void)g, (void)work, (void)accumulate;
}
static void direct_cpu(float *out, size_t ld_out, const void *x, lamp_dtype x_dtype, const float *wt, size_t ldw,
                       size_t n_out, const lamp_conv_geom *g, float *work) {
  (void)out, (void)ld_out, (void)x, (void)x_dtype, (void)wt, (void)ldw, (void)n_out, (void)g, (void)work;
}
#endif

int lamp_cpu_conv_direct_bf16_dot(void) { return have_bf16_dot(); }

int lamp_cpu_conv_direct_supported(const lamp_conv_geom *g) {
  return direct_geometry(g) && (have_avx512() || have_avx2());
}

size_t lamp_cpu_conv_direct_width(size_t n_out) { return (n_out + DIRECT_BLOCK - 1) / DIRECT_BLOCK * DIRECT_BLOCK; }

/* AVX2 reads bordered planes (and their slack); AVX-512 at most a widened copy of x. */
size_t lamp_cpu_conv_direct_work(const lamp_conv_geom *g) {
  size_t widened = g->channels * g->height * g->width;
  size_t bordered = g->channels * (g->height + 2) * (g->width + 2) + bordered_slack;
  size_t paired = channel_pairs(g) * g->height * g->width;
  size_t most = widened > bordered ? widened : bordered;
  return most > paired ? most : paired;
}

/* The bf16 pair kernel's planes and dy pairs each fit in the fp32 kernel's. */
size_t lamp_cpu_conv_direct_grad_work(const lamp_conv_geom *g, size_t n_out) {
  return bordered_floats(g) + g->height * g->width * padded_outputs(n_out);
}

size_t lamp_cpu_conv_direct_grad_acc(const lamp_conv_geom *g, size_t n_out) {
  return g->channels * 9 * padded_outputs(n_out);
}

lamp_status lamp_cpu_conv_direct_typed(float *out, size_t ld_out, const void *x, lamp_dtype x_dtype,
                                   const float *wt, size_t ldw, size_t n_out, const lamp_conv_geom *g, float *work) {
  if (!lamp_cpu_conv_direct_supported(g))
    return lamp_error(LAMP_ERR_UNSUPPORTED, "conv_direct: this geometry or CPU is not supported");
  if (ldw < lamp_cpu_conv_direct_width(n_out) || ldw % DIRECT_BLOCK != 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "conv_direct: ldw %zu must be a multiple of %d covering %zu outputs", ldw,
                      DIRECT_BLOCK, n_out);
  lamp_status s = lamp_cpu_check_float("conv_direct", "x", x_dtype);
  if (s != LAMP_OK) return s;
  direct_cpu(out, ld_out, x, x_dtype, wt, ldw, n_out, g, work);
  return LAMP_OK;
}

lamp_status lamp_cpu_conv_direct(float *out, size_t ld_out, const float *x, const float *wt,
                             size_t ldw, size_t n_out, const lamp_conv_geom *g, float *work) {
  return lamp_cpu_conv_direct_typed(out, ld_out, x, LAMP_F32, wt, ldw, n_out, g, work);
}

size_t lamp_cpu_conv_direct_pairs(const lamp_conv_geom *g, size_t n_out) {
  return padded_outputs(n_out) * channel_pairs(g) * 9;
}

lamp_status lamp_cpu_conv_direct_pair_weights(uint32_t *wp, const float *wt, size_t ldw, size_t n_out,
                                              const lamp_conv_geom *g) {
  if (!direct_geometry(g))
    return lamp_error(LAMP_ERR_UNSUPPORTED, "conv_direct_pair_weights: this geometry is not supported");
  if (ldw < lamp_cpu_conv_direct_width(n_out) || ldw % DIRECT_BLOCK != 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "conv_direct_pair_weights: ldw %zu must be a multiple of %d covering %zu outputs",
                      ldw, DIRECT_BLOCK, n_out);
  for (size_t o0 = 0; o0 < n_out; o0 += DIRECT_BLOCK)
    pair_weights(wp + o0 / DIRECT_BLOCK * channel_pairs(g) * 9 * DIRECT_BLOCK, wt, ldw, o0, g);
  return LAMP_OK;
}

lamp_status lamp_cpu_conv_direct_bf16(float *out, size_t ld_out, const uint16_t *x, const uint32_t *wp, size_t n_out,
                                      const lamp_conv_geom *g, float *work) {
  if (!direct_geometry(g) || !can_pair())
    return lamp_error(LAMP_ERR_UNSUPPORTED, "conv_direct_bf16: needs the 3x3 same geometry and AVX512_BF16");
  pairs_cpu(out, ld_out, x, wp, n_out, g, work);
  return LAMP_OK;
}

lamp_status lamp_cpu_conv_direct_grad_typed(float *acc, const void *x, lamp_dtype x_dtype,
                                        const float *dy, size_t n_out, const lamp_conv_geom *g, float *work,
                                        int accumulate) {
  if (!lamp_cpu_conv_direct_supported(g))
    return lamp_error(LAMP_ERR_UNSUPPORTED, "conv_direct_grad: this geometry or CPU is not supported");
  lamp_status s = lamp_cpu_check_float("conv_direct_grad", "x", x_dtype);
  if (s != LAMP_OK) return s;
  grad_cpu(acc, x, x_dtype, dy, n_out, g, work, accumulate);
  return LAMP_OK;
}

lamp_status lamp_cpu_conv_direct_grad_bf16(float *acc, const uint16_t *x, const uint16_t *dy, size_t n_out,
                                           const lamp_conv_geom *g, float *work, int accumulate) {
  if (!direct_geometry(g) || !can_pair())
    return lamp_error(LAMP_ERR_UNSUPPORTED, "conv_direct_grad_bf16: needs the 3x3 same geometry and AVX512_BF16");
  pairs_grad_cpu(acc, x, dy, n_out, g, work, accumulate);
  return LAMP_OK;
}

lamp_status lamp_cpu_conv_direct_grad(float *acc, const float *x, const float *dy, size_t n_out,
                                  const lamp_conv_geom *g, float *work, int accumulate) {
  return lamp_cpu_conv_direct_grad_typed(acc, x, LAMP_F32, dy, n_out, g, work, accumulate);
}

/* gw[o][r] (+)= acc[r][o]: the accumulators, output channels in the lanes, in the weights' layout. */
lamp_status lamp_cpu_conv_direct_grad_reduce(float *gw, size_t ldg, const float *acc, size_t n_out,
                                         size_t rows, int accumulate) {
  size_t o16 = padded_outputs(n_out);
  for (size_t o = 0; o < n_out; o++)
    for (size_t r = 0; r < rows; r++) {
      float v = acc[r * o16 + o];
      gw[o * ldg + r] = accumulate ? gw[o * ldg + r] + v : v;
    }
  return LAMP_OK;
}
