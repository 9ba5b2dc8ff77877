/*
** Convolution as GEMM: im2col lays the receptive fields of a batch of images out as the
** columns of one matrix, so a convolution is W [out, in*kh*kw] times that matrix; col2im is its
** adjoint (the input gradient). scatter_planes moves from the [channels, images * plane] layout
** a GEMM produces into NCHW.
**
** The hot case is a stride-1 row: the window's row is then a contiguous run of the input row,
** so it is copied with memcpy (or added in a vectorisable loop) and only the padded edges are
** handled element by element.
*/
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "tensor/half.h"

/* The output columns [lo, hi) whose input column ox * stride - pad + off lies inside [0, width). */
static void valid_columns(size_t out_w, size_t width, size_t stride, size_t pad, size_t off, size_t *lo,
                          size_t *hi) {
  /* ix = ox * stride + off - pad >= 0  <=>  ox >= ceil((pad - off) / stride) */
  size_t first = off >= pad ? 0 : (pad - off + stride - 1) / stride;
  /* ix < width  <=>  ox * stride < width + pad - off */
  size_t last = width + pad <= off ? 0 : (width + pad - off + stride - 1) / stride;
  if (last > out_w) last = out_w;
  if (first > last) first = last;
  *lo = first;
  *hi = last;
}

/* One output row of one (channel, i, j) column row: dst[ox] = src_row[ox * stride - pad + off]. */
static void fill_row(float *dst, const float *src_row, size_t out_w, size_t lo, size_t hi, size_t stride,
                     size_t start) {
  for (size_t ox = 0; ox < lo; ox++) dst[ox] = 0.0f;
  if (stride == 1) {
    memcpy(dst + lo, src_row + start, (hi - lo) * sizeof *dst);
  } else {
    for (size_t ox = lo; ox < hi; ox++) dst[ox] = src_row[start + (ox - lo) * stride];
  }
  for (size_t ox = hi; ox < out_w; ox++) dst[ox] = 0.0f;
}

/*
** The "same" stride-1 case (out_w == width, out_h == height): a column row of one image is the
** whole plane shifted by dy rows and dx columns, so it is one contiguous copy, after which the
** columns that wrapped around a row edge and the rows outside the image are zeroed.
*/
static int is_shift(const lamp_conv_geom *g) {
  return g->stride_h == 1 && g->stride_w == 1 && g->out_h == g->height && g->out_w == g->width;
}

static void shifted_plane(float *dst, const float *src, size_t h, size_t w, ptrdiff_t dy, ptrdiff_t dx) {
  ptrdiff_t hw = (ptrdiff_t)(h * w), H = (ptrdiff_t)h, W = (ptrdiff_t)w, off = dy * W + dx;
  ptrdiff_t y0 = dy < 0 ? -dy : 0, y1 = dy > 0 ? H - dy : H; /* output rows inside the image */
  if (y1 <= y0) {
    memset(dst, 0, (size_t)hw * sizeof *dst);
    return;
  }
  /* destination [d0, d1) copies src[d0 + off ...]: the valid rows, clipped to the source plane */
  ptrdiff_t d0 = y0 * W, d1 = y1 * W;
  if (d0 < -off) d0 = -off;
  if (d1 > hw - off) d1 = hw - off;
  if (d1 < d0) d0 = d1 = y0 * W;
  memset(dst, 0, (size_t)d0 * sizeof *dst); /* rows above (and a wrapped edge) */
  memcpy(dst + d0, src + d0 + off, (size_t)(d1 - d0) * sizeof *dst);
  memset(dst + d1, 0, (size_t)(hw - d1) * sizeof *dst); /* a wrapped edge, rows below */
  ptrdiff_t x0 = dx < 0 ? -dx : 0, x1 = dx > 0 ? W - dx : W; /* output columns inside the image */
  if (x0 > W) x0 = W;
  if (x1 < x0) x1 = x0;
  /* Column by column: the edges are a column or two, and a per-row loop would become a
     memset call for every row of every plane (GCC turns it into one). */
  for (ptrdiff_t xx = 0; xx < x0; xx++)
    for (ptrdiff_t y = y0; y < y1; y++) dst[y * W + xx] = 0.0f;
  for (ptrdiff_t xx = x1; xx < W; xx++)
    for (ptrdiff_t y = y0; y < y1; y++) dst[y * W + xx] = 0.0f;
}

static void im2col_shift(float *col, size_t ldcol, const float *x, size_t image_stride, size_t n_images,
                         const lamp_conv_geom *g) {
  size_t plane = g->height * g->width;
  for (size_t c = 0; c < g->channels; c++)
    for (size_t i = 0; i < g->kernel_h; i++)
      for (size_t j = 0; j < g->kernel_w; j++) {
        float *row = col + ((c * g->kernel_h + i) * g->kernel_w + j) * ldcol;
        ptrdiff_t dy = (ptrdiff_t)(i * g->dilation_h) - (ptrdiff_t)g->pad_h;
        ptrdiff_t dx = (ptrdiff_t)(j * g->dilation_w) - (ptrdiff_t)g->pad_w;
        for (size_t s = 0; s < n_images; s++)
          shifted_plane(row + s * plane, x + s * image_stride + c * plane, g->height, g->width, dy, dx);
      }
}

static void im2col_cpu(float *col, size_t ldcol, const float *x, size_t image_stride, size_t n_images,
                       const lamp_conv_geom *g) {
  if (is_shift(g)) {
    im2col_shift(col, ldcol, x, image_stride, n_images, g);
    return;
  }
  size_t out_hw = g->out_h * g->out_w, plane = g->height * g->width;
  for (size_t c = 0; c < g->channels; c++)
    for (size_t i = 0; i < g->kernel_h; i++)
      for (size_t j = 0; j < g->kernel_w; j++) {
        float *row = col + ((c * g->kernel_h + i) * g->kernel_w + j) * ldcol;
        size_t lo, hi, offx = j * g->dilation_w;
        valid_columns(g->out_w, g->width, g->stride_w, g->pad_w, offx, &lo, &hi);
        size_t start = lo * g->stride_w + offx - g->pad_w; /* input column of output column lo */
        for (size_t s = 0; s < n_images; s++) {
          const float *src = x + s * image_stride + c * plane;
          for (size_t oy = 0; oy < g->out_h; oy++) {
            float *dst = row + s * out_hw + oy * g->out_w;
            size_t offy = oy * g->stride_h + i * g->dilation_h; /* input row + pad */
            if (offy < g->pad_h || offy - g->pad_h >= g->height || lo == hi) {
              memset(dst, 0, g->out_w * sizeof *dst);
              continue;
            }
            fill_row(dst, src + (offy - g->pad_h) * g->width, g->out_w, lo, hi, g->stride_w, start);
          }
        }
      }
}

/* dst_row[start + (ox - lo) * stride] += src[ox] for ox in [lo, hi). */
static void add_row(float *dst_row, const float *src, size_t lo, size_t hi, size_t stride, size_t start) {
  if (stride == 1) {
    float *restrict d = dst_row + start;
    const float *restrict s = src + lo;
    for (size_t k = 0; k < hi - lo; k++) d[k] += s[k];
    return;
  }
  for (size_t ox = lo; ox < hi; ox++) dst_row[start + (ox - lo) * stride] += src[ox];
}

static void col2im_cpu(float *x, size_t image_stride, const float *col, size_t ldcol, size_t n_images,
                       const lamp_conv_geom *g) {
  size_t out_hw = g->out_h * g->out_w, plane = g->height * g->width;
  for (size_t c = 0; c < g->channels; c++)
    for (size_t i = 0; i < g->kernel_h; i++)
      for (size_t j = 0; j < g->kernel_w; j++) {
        const float *row = col + ((c * g->kernel_h + i) * g->kernel_w + j) * ldcol;
        size_t lo, hi, offx = j * g->dilation_w;
        valid_columns(g->out_w, g->width, g->stride_w, g->pad_w, offx, &lo, &hi);
        if (lo == hi) continue;
        size_t start = lo * g->stride_w + offx - g->pad_w;
        for (size_t s = 0; s < n_images; s++) {
          float *dst = x + s * image_stride + c * plane;
          for (size_t oy = 0; oy < g->out_h; oy++) {
            size_t offy = oy * g->stride_h + i * g->dilation_h;
            if (offy < g->pad_h || offy - g->pad_h >= g->height) continue;
            add_row(dst + (offy - g->pad_h) * g->width, row + s * out_hw + oy * g->out_w, lo, hi, g->stride_w,
                    start);
          }
        }
      }
}

static lamp_status check_geom(const char *fn, const lamp_conv_geom *g) {
  if (g->kernel_h == 0 || g->kernel_w == 0 || g->stride_h == 0 || g->stride_w == 0 || g->dilation_h == 0 ||
      g->dilation_w == 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: kernel, stride and dilation must be positive", fn);
  return LAMP_OK;
}

lamp_status lamp_cpu_im2col(float *col, size_t ldcol, const float *x, size_t image_stride,
                        size_t n_images, const lamp_conv_geom *g) {
  lamp_status s = check_geom("im2col", g);
  if (s != LAMP_OK) return s;
  im2col_cpu(col, ldcol, x, image_stride, n_images, g);
  return LAMP_OK;
}

lamp_status lamp_cpu_col2im(float *x, size_t image_stride, const float *col, size_t ldcol,
                        size_t n_images, const lamp_conv_geom *g) {
  lamp_status s = check_geom("col2im", g);
  if (s != LAMP_OK) return s;
  col2im_cpu(x, image_stride, col, ldcol, n_images, g);
  return LAMP_OK;
}

/* ---- [channels, images * plane] -> NCHW ------------------------------------------------- */

lamp_status lamp_cpu_scatter_planes(void *dst, lamp_dtype dst_dtype, size_t image_stride,
                                const float *src, const float *bias, size_t n_images, size_t channels,
                                size_t plane) {
  lamp_status s = lamp_cpu_check_float("scatter_planes", "dst", dst_dtype);
  if (s != LAMP_OK) return s;
  size_t ld = n_images * plane;
  float stage[LAMP_CPU_CHUNK];
  for (size_t c = 0; c < channels; c++) {
    float b = bias != NULL ? bias[c] : 0.0f;
    for (size_t i = 0; i < n_images; i++) {
      const float *from = src + c * ld + i * plane;
      size_t first = i * image_stride + c * plane;
      for (size_t p = 0; p < plane; p += LAMP_CPU_CHUNK) {
        size_t len = lamp_cpu_min(LAMP_CPU_CHUNK, plane - p);
        float *out = lamp_cpu_scratch(stage, dst, dst_dtype, first + p);
        if (bias != NULL)
          for (size_t k = 0; k < len; k++) out[k] = from[p + k] + b;
        else /* a plain copy keeps -0 a -0 */
          memcpy(out, from + p, len * sizeof *out);
        lamp_cpu_commit(dst, dst_dtype, first + p, out, len);
      }
    }
  }
  return LAMP_OK;
}
