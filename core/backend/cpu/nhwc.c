/*
** 16-bit images between NCHW and NHWC (lamp_cpu_nchw_to_nhwc16, cpu_backend.h), for the layers
** that hand oneDNN's AMX convolutions channels-last buffers (conv_dnnl.c). The data only moves,
** so every body gives the same bits; they differ in speed alone. oneDNN's own reorder moves the
** ResNet's 16- and 32-channel planes at about 9 GB/s; the AVX-512 body below is several times
** faster (docs/benchmarks.md).
**
** The AVX-512 body reads 32-bit pairs with one gather: in NCHW, pixels p and p + 1 of 16
** channels; in NHWC, channels c and c + 1 of 16 pixels. The low halves of the 16 lanes are then
** one output row and the high halves the next (vpmovdw), so a gather fills two 32-byte rows.
*/
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_AVX512_BODY 1
#endif

#include "backend/cpu/cpu_backend.h"
#include "base/cpu.h"

/* ---- the plain C twin ---------------------------------------------------------------------- */

static void to_nhwc_c(uint16_t *dst, const uint16_t *src, size_t images, size_t channels, size_t pixels) {
  for (size_t n = 0; n < images; n++, src += channels * pixels, dst += channels * pixels)
    for (size_t p = 0; p < pixels; p++)
      for (size_t c = 0; c < channels; c++) dst[p * channels + c] = src[c * pixels + p];
}

static void to_nchw_c(uint16_t *dst, const uint16_t *src, size_t images, size_t channels, size_t pixels) {
  for (size_t n = 0; n < images; n++, src += channels * pixels, dst += channels * pixels)
    for (size_t c = 0; c < channels; c++)
      for (size_t p = 0; p < pixels; p++) dst[c * pixels + p] = src[p * channels + c];
}

#ifdef HAVE_AVX512_BODY

/* ---- AVX-512 ------------------------------------------------------------------------------- */

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* The 16 lanes' 32-bit pairs at base + index[i] * 2 bytes, lanes off `keep` left 0. */
AVX512 static inline __m512i gather_pairs(const uint16_t *base, __m512i index, __mmask16 keep) {
  return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), keep, index, (const void *)base, 2);
}

/* Their low halves at lo, their high halves at hi, lanes off `keep` not written. */
AVX512 static inline void store_halves(uint16_t *lo, uint16_t *hi, __m512i pairs, __mmask16 keep) {
  _mm256_mask_storeu_epi16(lo, keep, _mm512_cvtepi32_epi16(pairs));
  _mm256_mask_storeu_epi16(hi, keep, _mm512_cvtepi32_epi16(_mm512_srli_epi32(pairs, 16)));
}

static __mmask16 first_lanes(size_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

/* One image: for 16 channels at a time, pixels two at a time; an odd last pixel in C (its pair
   would reach past the plane). */
AVX512 static void to_nhwc_image_avx512(uint16_t *dst, const uint16_t *src, size_t channels, size_t pixels) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i plane_index = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)pixels));
  for (size_t c0 = 0; c0 < channels; c0 += 16) {
    const __mmask16 keep = first_lanes(channels - c0);
    const uint16_t *from = src + c0 * pixels;
    size_t p = 0;
    for (; p + 2 <= pixels; p += 2)
      store_halves(dst + p * channels + c0, dst + (p + 1) * channels + c0, gather_pairs(from + p, plane_index, keep),
                   keep);
    for (; p < pixels; p++)
      for (size_t c = c0; c < channels && c < c0 + 16; c++) dst[p * channels + c] = src[c * pixels + p];
  }
}

/* One image: for 16 pixels at a time, channels two at a time; an odd last channel in C. */
AVX512 static void to_nchw_image_avx512(uint16_t *dst, const uint16_t *src, size_t channels, size_t pixels) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i pixel_index = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)channels));
  for (size_t p0 = 0; p0 < pixels; p0 += 16) {
    const __mmask16 keep = first_lanes(pixels - p0);
    const uint16_t *from = src + p0 * channels;
    size_t c = 0;
    for (; c + 2 <= channels; c += 2)
      store_halves(dst + c * pixels + p0, dst + (c + 1) * pixels + p0, gather_pairs(from + c, pixel_index, keep), keep);
    for (; c < channels; c++)
      for (size_t p = p0; p < pixels && p < p0 + 16; p++) dst[c * pixels + p] = src[p * channels + c];
  }
}

/* Gather indices are 32-bit element offsets: an image must have fewer than 2^31 elements. */
static int avx512_fits(size_t channels, size_t pixels) {
  return lamp_cpu_has(LAMP_ISA_AVX512BW) && lamp_cpu_has(LAMP_ISA_AVX512VL) && channels * pixels < ((size_t)1 << 31);
}

#endif

/* ---- the two directions -------------------------------------------------------------------- */

void lamp_cpu_nchw_to_nhwc16(uint16_t *dst, const uint16_t *src, size_t images, size_t channels, size_t pixels) {
#ifdef HAVE_AVX512_BODY
  if (avx512_fits(channels, pixels)) {
    for (size_t n = 0, image = channels * pixels; n < images; n++)
      to_nhwc_image_avx512(dst + n * image, src + n * image, channels, pixels);
    return;
  }
#endif
  to_nhwc_c(dst, src, images, channels, pixels);
}

void lamp_cpu_nhwc_to_nchw16(uint16_t *dst, const uint16_t *src, size_t images, size_t channels, size_t pixels) {
#ifdef HAVE_AVX512_BODY
  if (avx512_fits(channels, pixels)) {
    for (size_t n = 0, image = channels * pixels; n < images; n++)
      to_nchw_image_avx512(dst + n * image, src + n * image, channels, pixels);
    return;
  }
#endif
  to_nchw_c(dst, src, images, channels, pixels);
}
