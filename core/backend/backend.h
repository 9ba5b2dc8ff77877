/*
** The device seam: everything the core asks of a device, as lamp_X(device, ...) entry points.
** Each looks up the device's backend table (backend_impl.h, registered in registry.c) and calls
** its operation; a device without a backend, or a backend without the operation, fails with one
** message naming both ("gemm: device cuda is not supported by this build",
** "batchnorm_forward: not implemented for device sim").
**
** Conventions: matrices are row-major; `ld*` are row strides in elements; 16-bit inputs are
** widened exactly to fp32, arithmetic and accumulation are fp32, and results are rounded (nearest
** even) to the output dtype. Every pointer is memory of `device` unless its comment says host.
** Work may run after the call returns, in order with the device's other work (its queue); the
** host sees a result only through lamp_copy or lamp_synchronize. Kernels know no layers: the
** coarse operations at the end are named for the layer operation they compute, not for a layer
** that happens to use them.
*/
#ifndef LAMP_BACKEND_H
#define LAMP_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "lamp/host.h"
#include "tensor/memory.h"

/* The core's simulated device (core/backend/sim, built for the tests): memory the host can map
   but not read directly, and a queue that runs work later. Plugins never see this value: they
   see its memory through its host view, as cpu (see lamp_device_host_view). */
#define LAMP_SIM ((lamp_device)3)

/* What a backend can do beyond the operations it fills in. */
#define LAMP_CAP_NATIVE_16BIT_GEMM 0x1u /* lamp_gemm reads 16-bit inputs natively (else it widens) */
#define LAMP_CAP_HOST_VIEW 0x2u         /* its memory has a host address (lamp_device_host_view) */
#define LAMP_CAP_GRAPHS 0x4u            /* it records work as a graph and replays it (lamp_graph_begin) */
#define LAMP_CAP_NATIVE_BF16_GEMM 0x8u  /* lamp_gemm reads bf16 A and B natively (not convolutions) */

/* ---- devices, copies and ordering ------------------------------------------------------------ */

/* LAMP_OK when `device` has a backend, else why not (the message names the device). A device
   whose backend is a module (cuda: core/backend/module.h) is loaded by the first call that asks
   about it (this one, lamp_device_has/count/ordinal/select/describe, any operation); its failure
   is kept and given, with the same message, to every later ask. */
lamp_status lamp_device_check(lamp_device device);

/* Whether the device's backend has every capability in `caps` (0 without a backend). */
int lamp_device_has(lamp_device device, unsigned caps);

/* Devices of this kind this process can use (0 without a backend or a driver). */
int lamp_device_count(lamp_device device);

/* A device from its name ("cpu", "cuda", "sim"); LAMP_ERR_INVALID_ARG naming the known ones. */
lamp_status lamp_device_parse(const char *name, lamp_device *out);

/* What one device is, for lamp.device() and `lamp devices`. */
typedef struct lamp_device_info {
  char name[256];         /* "NVIDIA H200"; the processor's model name on the CPU */
  size_t memory;          /* bytes of device memory (the host's physical memory on the CPU); 0: unknown */
  int cc_major, cc_minor; /* CUDA compute capability (9.0 on an H200); 0.0 where there is none */
  char gemm[128];         /* what computes its GEMMs, on the CPU "openblas" or "openblas; bf16: dnnl";
                             "" where the backend does not say */
} lamp_device_info;

/* Device `ordinal` (in [0, lamp_device_count)) of `device`'s kind; fails as lamp_device_check, or
   with the device library's reason. */
lamp_status lamp_device_describe(lamp_device device, int ordinal, lamp_device_info *out);

/* Which of the devices of `device`'s kind this process uses: 0 unless lamp_device_select chose
   another; -1 without a backend. */
int lamp_device_ordinal(lamp_device device);
/* Chooses it; an ordinal outside [0, lamp_device_count) is LAMP_ERR_INVALID_ARG naming both. */
lamp_status lamp_device_select(lamp_device device, int ordinal);

/* The device this process trains on (set by lamp.device() and by a Trainer): what plugins are
   told the run uses. LAMP_CPU until set; setting a device without a backend fails, naming it. */
lamp_device lamp_run_device(void);
lamp_status lamp_set_run_device(lamp_device device);

/*
** bytes from src on src_device to dst on dst_device; either side may be the host (LAMP_HOST).
** Returns once a host source may be reused and a host destination holds the data; a copy within
** one device is queued in order with its other work.
*/
lamp_status lamp_copy(lamp_device dst_device, void *dst, lamp_device src_device, const void *src, size_t bytes);

/* Host memory to `device`, queued: the host must leave src unchanged until an event recorded after
   this call has been waited for (lamp_event_wait). Where the device runs work on the calling thread,
   the copy is done on return. */
lamp_status lamp_upload_async(lamp_device device, void *dst, const void *src, size_t bytes);

/* ptr[0 .. bytes) = 0, queued. */
lamp_status lamp_zero(lamp_device device, void *ptr, size_t bytes);

/*
** Returns when all work queued on the device so far is done. Errors of queued work are reported,
** as CUDA's are, by the next call that waits for the queue (this one, a blocking lamp_copy, an
** event wait): the first failure not yet reported, which is then cleared.
*/
lamp_status lamp_synchronize(lamp_device device);

/* A point in a device's queue: record it after some work, then wait for the work to be done. */
typedef struct lamp_event lamp_event;
lamp_status lamp_event_new(lamp_device device, lamp_event **out);
void lamp_event_free(lamp_event *event); /* NULL is a no-op; waits for nothing */
lamp_status lamp_event_record(lamp_event *event);
/* The host waits until the queue has passed the last record (at once if never recorded). */
lamp_status lamp_event_wait(lamp_event *event);

/*
** The host's worker threads (the CPU backend's pool), for host code that is not a kernel:
** fn(ctx, worker, task) for every task in [0, n_tasks), dealt statically over
** lamp_host_threads() threads (worker identifies the thread), so which thread runs which task
** depends on the counts alone, never on timing. Returns the first failure, its message carried to
** the calling thread; a call from inside a task runs serially.
*/
typedef lamp_status (*lamp_task_fn)(void *ctx, size_t worker, size_t task);
lamp_status lamp_host_parallel_for(size_t n_tasks, lamp_task_fn fn, void *ctx);
size_t lamp_host_threads(void);

/* The host address of device memory where the backend has LAMP_CAP_HOST_VIEW, else NULL. Only for
   handing memory to code that runs on the host (plugins built for the CPU), after
   lamp_synchronize: the device does not order host accesses. */
void *lamp_device_host_view(lamp_device device, const void *ptr);

/* The device's queue handle for plugins (a cudaStream_t on CUDA); NULL where work is not queued. */
void *lamp_device_stream(lamp_device device);

/* The workspaces the backends keep between calls for work this thread issued (widened 16-bit
   GEMM operands, staging) are handed back now rather than at thread exit. */
void lamp_backend_release_workspace(void);

/* ---- graphs: queued work recorded once and replayed (CUDA Graphs) ---------------------------- */

/*
** Between lamp_graph_begin and lamp_graph_end, the work queued on `device` is recorded instead of
** run. lamp_graph_launch queues the recorded work again, with the arguments it was recorded with
** (the same pointers, sizes and scalars), as often as asked, in order with the device's other
** work; a replay runs no host code, so whatever the host decided while recording holds for every
** replay. Devices with LAMP_CAP_GRAPHS only.
**
** While recording, what a replay could not repeat is refused, with an error naming it: allocating
** device memory, anything that waits for the device (lamp_synchronize, a blocking copy, an event
** record or wait) and lamp_upload_async (the host data would not be read again). Memory freed
** while recording is freed when recording ends. lamp_graph_end always ends the recording; after a
** refusal it returns that first refusal's status and message, drops what was recorded (none of it
** ran) and leaves *out NULL.
**
** The graph reads and writes the memory it was recorded with: it may be launched only while that
** memory is still allocated, in place (tensor/ledger.h's lamp_ledger_changes tells whether any
** device memory was allocated or freed since).
*/
typedef struct lamp_graph lamp_graph;
lamp_status lamp_graph_begin(lamp_device device);
lamp_status lamp_graph_end(lamp_device device, lamp_graph **out);
lamp_status lamp_graph_launch(lamp_graph *graph);
void lamp_graph_free(lamp_graph *graph); /* NULL is a no-op; replays already queued still run */

/* ---- kernels --------------------------------------------------------------------------------- */

/* C[m,n] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T. A, B in f32/f16/bf16 (mixed
   allowed), C in f32/f16/bf16. With beta == 0, C is not read (it may hold NaN). */
lamp_status lamp_gemm(lamp_device device, int trans_a, int trans_b, size_t m, size_t n, size_t k,
                      float alpha, const void *a, lamp_dtype a_dtype, size_t lda, const void *b,
                      lamp_dtype b_dtype, size_t ldb, float beta, void *c, lamp_dtype c_dtype,
                      size_t ldc);

/* dst = src converted element by element (any pair of f32/f16/bf16; same dtype copies). */
lamp_status lamp_convert(lamp_device device, void *dst, lamp_dtype dst_dtype, const void *src,
                         lamp_dtype src_dtype, size_t n);

/* x[i] = value for i < n (x in f32/f16/bf16). */
lamp_status lamp_fill(lamp_device device, void *x, lamp_dtype dtype, size_t n, float value);

/* y[r, c] += bias[c] for r < rows, c < cols; y and bias in f32/f16/bf16. */
lamp_status lamp_add_bias_rows(lamp_device device, void *y, lamp_dtype y_dtype, const void *bias,
                               lamp_dtype bias_dtype, size_t rows, size_t cols);

/* out[c] = beta * out[c] + alpha * sum_r dy[r, c] (the bias gradient); out is fp32 and is not
   read when beta == 0. */
lamp_status lamp_sum_rows(lamp_device device, float *out, const void *dy, lamp_dtype dy_dtype,
                          size_t rows, size_t cols, float alpha, float beta);

/* y = max(x, 0); y and x may alias. NaN passes through; -0 becomes +0. */
lamp_status lamp_relu_forward(lamp_device device, void *y, const void *x, lamp_dtype dtype,
                              size_t n);

/* dx = dy where y > 0, else 0 (y is the forward output); dx and dy may alias. */
lamp_status lamp_relu_backward(lamp_device device, void *dx, const void *dy, const void *y,
                               lamp_dtype dtype, size_t n);

/*
** Fused log-softmax + negative log-likelihood over `rows` rows of `classes` logits, all in
** fp32 whatever the logits' dtype. Writes the mean loss to *loss, and when dlogits is not
** NULL the gradient of (grad_scale * mean loss): (softmax - onehot) * grad_scale / rows, in
** dlogits_dtype. A label outside [0, classes) is LAMP_ERR_INVALID_ARG naming row and label.
** If `correct` is not NULL it receives the number of rows whose argmax equals the label.
** loss, labels and correct are device memory like the rest.
*/
lamp_status lamp_cross_entropy(lamp_device device, const void *logits, lamp_dtype logits_dtype,
                               const int32_t *labels, size_t rows, size_t classes,
                               float grad_scale, double *loss, void *dlogits,
                               lamp_dtype dlogits_dtype, size_t *correct);

/* out[r] = index of the largest of row r's `cols` values (first one on ties; NaN counts as the
   largest, as in PyTorch). cols == 0 is an error. */
lamp_status lamp_argmax_rows(lamp_device device, int32_t *out, const void *x, lamp_dtype dtype,
                             size_t rows, size_t cols);

/* g *= inv_scale; *found_inf = 1 on inf/NaN, left alone otherwise (callers zero it first). */
lamp_status lamp_unscale_and_check(lamp_device device, float *g, size_t n, float inv_scale,
                                   int *found_inf);

/* dst = src rounded to `via` (f32, f16 or bf16) and widened back: fp32 storage holding the
   values a `via` tensor would. dst may equal src. */
lamp_status lamp_round_through(lamp_device device, float *dst, const float *src, lamp_dtype via,
                               size_t n);

/* dst += src rounded to `via`: gradients produced in a 16-bit dtype, accumulated in fp32. */
lamp_status lamp_accumulate_rounded(lamp_device device, float *dst, const float *src,
                                    lamp_dtype via, size_t n);

/*
** dst = src rounded stochastically to dst_dtype (f16 or bf16; tensor/stochastic_round.h): element
** i with the random word lamp_philox_word(seed, stream, i) (tensor/philox.h), so the bits depend
** on nothing but the arguments, not on the device, its thread count or its timing. dst and src
** do not overlap.
*/
lamp_status lamp_round_stochastic(lamp_device device, void *dst, lamp_dtype dst_dtype, const float *src,
                                  size_t n, uint64_t seed, uint64_t stream);

/* x *= alpha. */
lamp_status lamp_scale(lamp_device device, float *x, size_t n, float alpha);

/* y += alpha * x. */
lamp_status lamp_axpy(lamp_device device, float *y, const float *x, size_t n, float alpha);

/* *out = sum of x[i]^2, accumulated in double (for global-norm clipping). */
lamp_status lamp_sum_squares(lamp_device device, const float *x, size_t n, double *out);

/* y += x elementwise, in fp32, rounded to y's dtype (a residual connection). */
lamp_status lamp_add_into(lamp_device device, void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype,
                          size_t n);

/* y = a + b elementwise, in fp32, rounded to y's dtype; y may alias a or b exactly. With `relu`,
   y = max(a + b, 0) from the same fp32 sum (v <= 0 gives +0, NaN stays NaN), rounded once. */
lamp_status lamp_add(lamp_device device, void *y, lamp_dtype y_dtype, const void *a, lamp_dtype a_dtype,
                     const void *b, lamp_dtype b_dtype, size_t n, int relu);

/* y = mask ? x * scale : 0 elementwise (Dropout); y and x may alias; mask holds 0 or 1 bytes. */
lamp_status lamp_apply_mask(lamp_device device, void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype,
                            const uint8_t *mask, float scale, size_t n);

/* ---- coarse layer operations (NCHW) ---------------------------------------------------------- */

/* The geometry of one sliding window over the planes of an image (host memory, by value). */
typedef struct lamp_conv_geom {
  size_t channels, height, width;      /* input planes of one image (or of one group) */
  size_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  size_t out_h, out_w;
} lamp_conv_geom;

/*
** Pooling over n_planes planes (N * C), the geometry per plane (channels is ignored), x and y in
** any float dtype. Max pooling: argmax [n_planes, out_h, out_w] holds the winner's index inside its
** plane (-1 where the window holds only padding); NaN wins, as in PyTorch. Average pooling counts
** the padding in the divisor (count_include_pad). Backward writes every element of dx.
*/
lamp_status lamp_maxpool_forward(lamp_device device, void *y, lamp_dtype y_dtype, int32_t *argmax, const void *x,
                                 lamp_dtype x_dtype, size_t n_planes, const lamp_conv_geom *g);
lamp_status lamp_maxpool_backward(lamp_device device, void *dx, lamp_dtype dx_dtype, const void *dy,
                                  lamp_dtype dy_dtype, const int32_t *argmax, size_t n_planes,
                                  const lamp_conv_geom *g);
lamp_status lamp_avgpool_forward(lamp_device device, void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype,
                                 size_t n_planes, const lamp_conv_geom *g);
lamp_status lamp_avgpool_backward(lamp_device device, void *dx, lamp_dtype dx_dtype, const void *dy,
                                  lamp_dtype dy_dtype, size_t n_planes, const lamp_conv_geom *g);

/* A 2-D convolution's shape: x [batch, in, height, width], weight [out, in / groups, kernel,
   kernel] (PyTorch's layout), y [batch, out, out_h, out_w]. */
typedef struct lamp_conv2d_shape {
  size_t batch, in_channels, out_channels, groups;
  size_t height, width, kernel, stride, padding, dilation;
  size_t out_h, out_w;
} lamp_conv2d_shape;

/*
** One convolution call. Autocast: the products see x, dy and the weights with the values of
** `compute` and accumulate in fp32. weight and bias arrive as GEMM operands already (their
** compute-dtype values, stored in operand_dtype: fp32 where the device widens 16-bit GEMM inputs,
** see LAMP_CAP_NATIVE_16BIT_GEMM); x and dy arrive as stored, in any float dtype.
** Parameter gradients are produced in grad_dtype (an fp32 sum rounded to it once) and then written
** (overwrite_grads) or added into the fp32 slabs grad_weight and grad_bias.
*/
typedef struct lamp_conv2d_args {
  lamp_conv2d_shape shape;
  lamp_dtype compute;
  const void *x;
  lamp_dtype x_dtype;
  const void *weight, *bias; /* bias NULL: none */
  lamp_dtype operand_dtype;
  void *y; /* forward */
  lamp_dtype y_dtype;
  const void *dy; /* backward */
  lamp_dtype dy_dtype;
  void *dx; /* NULL: no input gradient */
  lamp_dtype dx_dtype;
  float *grad_weight, *grad_bias; /* NULL: no parameter gradients (grad_bias also when bias is NULL) */
  lamp_dtype grad_dtype;
  int overwrite_grads;
} lamp_conv2d_args;

/*
** y = conv(x, weight) + bias, rounded once to y's dtype. *plan is the backend's state for one
** layer (workspaces, transformed weights, algorithm choice): NULL at first, made by the backend,
** handed back on every call of that layer and freed with lamp_conv2d_plan_free.
*/
lamp_status lamp_conv2d_forward(lamp_device device, void **plan, const lamp_conv2d_args *a);

/*
** The backward of the last forward with the same plan and weights (a backend may keep what the
** forward prepared): backward-data into dx when dx is not NULL, backward-filter into the
** gradient slabs when grad_weight is not NULL; asking for both in one call lets a backend share
** its pass over dy. An empty batch still writes the gradients (zeros) when overwrite_grads is set.
*/
lamp_status lamp_conv2d_backward(lamp_device device, void **plan, const lamp_conv2d_args *a);

void lamp_conv2d_plan_free(lamp_device device, void *plan); /* NULL is a no-op */

/*
** BatchNorm over the channels of [batch, channels, plane] tensors, PyTorch's semantics:
**   training:   y = (x - mean_B) / sqrt(var_B + eps) * weight + bias with the batch's mean and
**               biased variance; running_mean/var move by `momentum` toward the batch's mean and
**               UNBIASED variance; batches_tracked[0] += 1. Needs batch * plane >= 2.
**   inference:  the running statistics replace the batch's.
** Statistics, normalisation and gradients are fp32 (sums in double) whatever the dtypes of x, y,
** dy and dx. `saved` [4 * channels] receives, in forward, the mean, 1/std, and the affine map
** y = x * scale + shift that was applied; backward reads them. With `relu` the forward applies a
** ReLU on the way out (the same bits as a separate ReLU on the stored output), and the backward
** takes dy at that ReLU's output, recomputing its mask from x and the saved map.
*/
typedef struct lamp_batchnorm_args {
  size_t batch, channels, plane;
  double momentum, eps;
  int training; /* forward: use and update batch statistics; backward: the forward did */
  int relu;
  const void *x;
  lamp_dtype x_dtype;
  void *y; /* forward */
  lamp_dtype y_dtype; /* also in backward with relu: the dtype of the stored rectified output */
  const float *weight, *bias; /* [channels]; NULL: no affine map (weight 1, bias 0) */
  float *running_mean, *running_var, *batches_tracked; /* forward */
  float *saved;
  const void *dy; /* backward */
  lamp_dtype dy_dtype;
  void *dx; /* NULL: no input gradient */
  lamp_dtype dx_dtype;
  float *grad_weight, *grad_bias; /* NULL: no parameter gradients; as in lamp_conv2d_args */
  lamp_dtype grad_dtype;
  int overwrite_grads;
} lamp_batchnorm_args;

lamp_status lamp_batchnorm_forward(lamp_device device, const lamp_batchnorm_args *a);
lamp_status lamp_batchnorm_backward(lamp_device device, const lamp_batchnorm_args *a);

#endif
