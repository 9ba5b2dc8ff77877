/*
** The simulated device's stream: what its backend's stream() returns, and so the stream the core
** hands a communicator's all_reduce_enqueue and wait_stream on the sim. A plugin written for the
** sim (a test communicator, tests/bad_plugins/stream_comm.c) queues its own work there, in order
** with the device's, the way cudaLaunchHostFunc queues a host function on a CUDA stream; the sim
** reaches plugins as the CPU with host views, so that work reads and writes the host views it was
** handed. Self-contained (lamp/abi.h only), so a plugin includes it without the core's headers.
*/
#ifndef LAMP_BACKEND_SIM_STREAM_H
#define LAMP_BACKEND_SIM_STREAM_H

#include "lamp/abi.h"

#define LAMP_SIM_STREAM_MAGIC 0x73696d73u /* "sims": tells a sim stream from another device's */

typedef struct lamp_sim_stream {
  uint32_t magic;
  /* Queues fn(arg) after the work queued so far; it runs on the device's worker, before the work
     queued after it. Fails (LAMP_ERR_SYSTEM) only when nothing can be queued. */
  lamp_status (*launch_host_func)(void (*fn)(void *arg), void *arg);
} lamp_sim_stream;

#endif
