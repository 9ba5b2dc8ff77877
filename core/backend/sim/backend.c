/*
** The simulated device's tables (sim.h): its memory and queue, and the CPU backend's operations
** run on the queue through host views. Plugins see its memory through host_view, after
** lamp_synchronize, as CPU memory; its stream (sim_stream.h) lets a plugin written for it queue
** host functions in order with its work instead, as a stream-ordered communicator does on CUDA.
**
** Two tables share every operation and differ in one capability. lamp_sim_backend has no
** LAMP_CAP_NATIVE_16BIT_GEMM, as on the CPU, so callers hand it the same fp32 operands (and it
** refuses 16-bit convolution operands as the CPU does). lamp_sim_native16_backend has it, as
** CUDA does (cuBLAS and cuDNN read fp16/bf16): the layers then hand its gemm and convolutions
** 16-bit operands and keep no widened fp32 copies; the CPU's gemm widens them exactly inside the
** operation, and so do this table's convolutions before calling the CPU's (ops.c). Widening is
** exact and the products are the same fp32 values, so both tables train to the CPU's bits. Both
** also take the CPU's capabilities known at run time (caps_now): where the CPU's gemm reads bf16
** natively, the layers hand both tables' gemm the bf16 operands they hand the CPU's.
*/
#include "backend/cpu/cpu_backend.h"
#include "backend/sim/sim.h"
#include "backend/sim/sim_impl.h"

static int sim_count(void) { return 1; }

/* Every member but caps and the convolutions, shared by both tables. */
#define SIM_TABLE                                                \
  .memory = {"sim", lamp_sim_alloc, lamp_sim_free, lamp_sim_zero}, \
  .count = sim_count,                                            \
  .upload = lamp_sim_upload,                                     \
  .upload_async = lamp_sim_upload_async,                         \
  .download = lamp_sim_download,                                 \
  .copy = lamp_sim_copy,                                         \
  .synchronize = lamp_sim_synchronize,                           \
  .event_new = lamp_sim_event_new,                               \
  .event_free = lamp_sim_event_free,                             \
  .event_record = lamp_sim_event_record,                         \
  .event_wait = lamp_sim_event_wait,                             \
  .host_view = lamp_sim_host_view,                               \
  .stream = lamp_sim_stream_handle,                              \
  .release_workspace = lamp_sim_release_workspace,               \
  .gemm = lamp_sim_gemm,                                         \
  .convert = lamp_sim_convert,                                   \
  .fill = lamp_sim_fill,                                         \
  .add_bias_rows = lamp_sim_add_bias_rows,                       \
  .sum_rows = lamp_sim_sum_rows,                                 \
  .relu_forward = lamp_sim_relu_forward,                         \
  .relu_backward = lamp_sim_relu_backward,                       \
  .cross_entropy = lamp_sim_cross_entropy,                       \
  .argmax_rows = lamp_sim_argmax_rows,                           \
  .unscale_and_check = lamp_sim_unscale_and_check,               \
  .round_through = lamp_sim_round_through,                       \
  .accumulate_rounded = lamp_sim_accumulate_rounded,             \
  .scale = lamp_sim_scale,                                       \
  .axpy = lamp_sim_axpy,                                         \
  .sum_squares = lamp_sim_sum_squares,                           \
  .add_into = lamp_sim_add_into,                                 \
  .add = lamp_sim_add,                                           \
  .apply_mask = lamp_sim_apply_mask,                             \
  .maxpool_forward = lamp_sim_maxpool_forward,                   \
  .maxpool_backward = lamp_sim_maxpool_backward,                 \
  .avgpool_forward = lamp_sim_avgpool_forward,                   \
  .avgpool_backward = lamp_sim_avgpool_backward,                 \
  .conv2d_plan_free = lamp_sim_conv2d_plan_free,                 \
  .batchnorm_forward = lamp_sim_batchnorm_forward,               \
  .batchnorm_backward = lamp_sim_batchnorm_backward,                \
  .graph_begin = lamp_sim_graph_begin,                           \
  .graph_end = lamp_sim_graph_end,                               \
  .graph_launch = lamp_sim_graph_launch,                         \
  .graph_free = lamp_sim_graph_free,                             \
  .round_stochastic = lamp_sim_round_stochastic,                 \
  .caps_now = lamp_cpu_caps_now

const lamp_backend lamp_sim_backend = {SIM_TABLE, .caps = LAMP_CAP_HOST_VIEW | LAMP_CAP_GRAPHS,
                                       .conv2d_forward = lamp_sim_conv2d_forward,
                                       .conv2d_backward = lamp_sim_conv2d_backward};

const lamp_backend lamp_sim_native16_backend = {SIM_TABLE, .caps = LAMP_CAP_HOST_VIEW | LAMP_CAP_NATIVE_16BIT_GEMM | LAMP_CAP_GRAPHS,
                                                .conv2d_forward = lamp_sim_native16_conv2d_forward,
                                                .conv2d_backward = lamp_sim_native16_conv2d_backward};
