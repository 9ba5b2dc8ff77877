/*
** Private to the simulated device (sim.h): its arena (memory.c), its queue (queue.c) and the
** operations of its table (ops.c), which backend.c gathers into lamp_sim_backend.
*/
#ifndef LAMP_BACKEND_SIM_IMPL_H
#define LAMP_BACKEND_SIM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend_impl.h"

/* ---- the arena (memory.c) -------------------------------------------------------------------- */
/* One memfd, mapped PROT_NONE for the device view and read-write for the host view; device
   pointers are offsets into the first, translated into the second. */

/* The allocator lent to core/tensor: 64-byte aligned device-view blocks; NULL with the error set. */
void *lamp_sim_alloc(size_t bytes);
/* Queued, so the block is reused only after the work queued before the free is done. */
void lamp_sim_free(void *ptr);
/* ptr[0 .. bytes) = 0, queued. */
lamp_status lamp_sim_zero(void *ptr, size_t bytes);

/* The host view of a device pointer; NULL for NULL and for anything outside the arena. */
void *lamp_sim_host_view(const void *ptr);

/*
** *host = the host view of ptr, argument `name` of operation `op`; NULL stays NULL. Anything else
** outside the arena is a host pointer handed to the device: LAMP_ERR_INVALID_ARG naming both.
*/
lamp_status lamp_sim_arg(const char *op, const char *name, const void *ptr, void **host);

/* Returns a block to the free list at once (the queued half of lamp_sim_free). */
lamp_status lamp_sim_release(void *ptr);

/* ---- the queue (queue.c) --------------------------------------------------------------------- */
/* One worker thread runs closures strictly in the order they were queued. */

/* A queued operation: runs on the worker with `args`, the closure's own copy of its arguments. */
typedef lamp_status (*lamp_sim_fn)(const void *args);

/* Queues fn with a copy of args[0 .. size) (args may be NULL when size is 0); *seq (when not
   NULL) receives its sequence number. Fails only when the operation cannot be queued (no worker, no memory), queuing nothing. */
lamp_status lamp_sim_enqueue(lamp_sim_fn fn, const void *args, size_t size, uint64_t *seq);

/* lamp_sim_enqueue for the calls that cannot fail (free, plan_free): when queuing is impossible,
   waits for the queue and runs fn here, a failure becoming the sticky error. */
void lamp_sim_enqueue_or_run(lamp_sim_fn fn, const void *args, size_t size);

/* Waits until operation `seq` is done, then returns (and clears) the sticky error of the queue:
   the first failure of any operation since it was last reported. */
lamp_status lamp_sim_wait(uint64_t seq);

/* Queues fn and waits for it (lamp_sim_wait): the blocking copies. */
lamp_status lamp_sim_run_and_wait(lamp_sim_fn fn, const void *args, size_t size);

/* lamp_sim_wait for everything queued so far. */
lamp_status lamp_sim_synchronize(void);

/* Waits for everything queued so far, leaving the sticky error for the next waiter to report. */
void lamp_sim_drain(void);

lamp_status lamp_sim_event_new(void **event);
void lamp_sim_event_free(void *event);
lamp_status lamp_sim_event_record(void *event);
lamp_status lamp_sim_event_wait(void *event);

/*
** Graphs (the table's graph slots). While one is captured, lamp_sim_enqueue records instead of
** queuing, lamp_sim_enqueue_or_run (the frees) holds its operation back until the capture ends,
** and what a replay could not repeat is refused through lamp_sim_refuse_in_capture: LAMP_OK when
** no graph is being captured, else the error "sim: <what> while a graph is being captured (...)",
** the first of which lamp_sim_graph_end returns, dropping the recording.
*/
int lamp_sim_capturing(void);
lamp_status lamp_sim_refuse_in_capture(const char *what);
lamp_status lamp_sim_graph_begin(void);
lamp_status lamp_sim_graph_end(void **graph);
lamp_status lamp_sim_graph_launch(void *graph);
void lamp_sim_graph_free(void *graph);

/* The table's stream(): the lamp_sim_stream of sim_stream.h. */
void *lamp_sim_stream_handle(void);

/* The CPU backend's per-thread workspaces on the worker, freed there. */
void lamp_sim_release_workspace(void);

/* ---- the operations (ops.c) ------------------------------------------------------------------ */
/* Each translates its device pointers on the calling thread and queues the CPU backend's
   operation on those host views. */

lamp_status lamp_sim_upload(void *dst, const void *host_src, size_t bytes);
lamp_status lamp_sim_upload_async(void *dst, const void *host_src, size_t bytes);
lamp_status lamp_sim_download(void *host_dst, const void *src, size_t bytes);
lamp_status lamp_sim_copy(void *dst, const void *src, size_t bytes);

lamp_status lamp_sim_gemm(int trans_a, int trans_b, size_t m, size_t n, size_t k, float alpha, const void *a,
                          lamp_dtype a_dtype, size_t lda, const void *b, lamp_dtype b_dtype, size_t ldb, float beta,
                          void *c, lamp_dtype c_dtype, size_t ldc);
lamp_status lamp_sim_convert(void *dst, lamp_dtype dst_dtype, const void *src, lamp_dtype src_dtype, size_t n);
lamp_status lamp_sim_fill(void *x, lamp_dtype dtype, size_t n, float value);
lamp_status lamp_sim_add_bias_rows(void *y, lamp_dtype y_dtype, const void *bias, lamp_dtype bias_dtype, size_t rows,
                                   size_t cols);
lamp_status lamp_sim_sum_rows(float *out, const void *dy, lamp_dtype dy_dtype, size_t rows, size_t cols, float alpha,
                              float beta);
lamp_status lamp_sim_relu_forward(void *y, const void *x, lamp_dtype dtype, size_t n);
lamp_status lamp_sim_relu_backward(void *dx, const void *dy, const void *y, lamp_dtype dtype, size_t n);
lamp_status lamp_sim_cross_entropy(const void *logits, lamp_dtype logits_dtype, const int32_t *labels, size_t rows,
                                   size_t classes, float grad_scale, double *loss, void *dlogits,
                                   lamp_dtype dlogits_dtype, size_t *correct);
lamp_status lamp_sim_argmax_rows(int32_t *out, const void *x, lamp_dtype dtype, size_t rows, size_t cols);
lamp_status lamp_sim_unscale_and_check(float *g, size_t n, float inv_scale, int *found_inf);
lamp_status lamp_sim_round_through(float *dst, const float *src, lamp_dtype via, size_t n);
lamp_status lamp_sim_accumulate_rounded(float *dst, const float *src, lamp_dtype via, size_t n);
lamp_status lamp_sim_round_stochastic(void *dst, lamp_dtype dst_dtype, const float *src, size_t n, uint64_t seed,
                                      uint64_t stream);
lamp_status lamp_sim_scale(float *x, size_t n, float alpha);
lamp_status lamp_sim_axpy(float *y, const float *x, size_t n, float alpha);
lamp_status lamp_sim_sum_squares(const float *x, size_t n, double *out);
lamp_status lamp_sim_add_into(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n);
lamp_status lamp_sim_add(void *y, lamp_dtype y_dtype, const void *a, lamp_dtype a_dtype, const void *b,
                         lamp_dtype b_dtype, size_t n, int relu);
lamp_status lamp_sim_apply_mask(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, const uint8_t *mask,
                                float scale, size_t n);
lamp_status lamp_sim_maxpool_forward(void *y, lamp_dtype y_dtype, int32_t *argmax, const void *x, lamp_dtype x_dtype,
                                     size_t n_planes, const lamp_conv_geom *g);
lamp_status lamp_sim_maxpool_backward(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                      const int32_t *argmax, size_t n_planes, const lamp_conv_geom *g);
lamp_status lamp_sim_avgpool_forward(void *y, lamp_dtype y_dtype, const void *x, lamp_dtype x_dtype, size_t n_planes,
                                     const lamp_conv_geom *g);
lamp_status lamp_sim_avgpool_backward(void *dx, lamp_dtype dx_dtype, const void *dy, lamp_dtype dy_dtype,
                                      size_t n_planes, const lamp_conv_geom *g);
lamp_status lamp_sim_conv2d_forward(void **plan, const lamp_conv2d_args *a);
lamp_status lamp_sim_conv2d_backward(void **plan, const lamp_conv2d_args *a);
/* The native-16 table's: 16-bit weight and bias operands widened exactly to fp32 on the worker. */
lamp_status lamp_sim_native16_conv2d_forward(void **plan, const lamp_conv2d_args *a);
lamp_status lamp_sim_native16_conv2d_backward(void **plan, const lamp_conv2d_args *a);
void lamp_sim_conv2d_plan_free(void *plan);
lamp_status lamp_sim_batchnorm_forward(const lamp_batchnorm_args *a);
lamp_status lamp_sim_batchnorm_backward(const lamp_batchnorm_args *a);

#endif
