/*
** The CUDA module's entry (module.h): checks the core's services, counts the devices, and hands
** back the table: the runtime slots from this side (device.c, memory.c, queue.c), the kernel slots
** from lamp_cuda_fill_kernels. It is the one symbol the module exports.
*/
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"

#define LAMP_CUDA_EXPORT __attribute__((visibility("default")))

/* What the module keeps between calls, handed back when the core says its work is over
   (lamp_backend_release_workspace): the scratch buffer, the pinned staging, and the kernel side's
   cuBLAS handle and fault record (kernels.h), made again on the next use. The stream is drained
   first so that no kernel still writes a fault into the record being freed. */
static void release_workspace(void) {
  if (!lamp_cuda_is_active() || lamp_cuda_capturing()) return;
  if (lamp_cuda_synchronize() != LAMP_OK) return; /* failed work: keep everything it may still touch */
  lamp_cuda_kernels_release();
  lamp_cuda_memory_release();
  lamp_cuda_queue_release();
}

static lamp_backend table;

LAMP_CUDA_EXPORT lamp_status lamp_backend_module_open(const lamp_backend_services *svc, const lamp_backend **out);

lamp_status lamp_backend_module_open(const lamp_backend_services *svc, const lamp_backend **out) {
  lamp_status st = lamp_backend_services_check(svc, "cuda", LAMP_BACKEND_MODULE_VERSION, sizeof(lamp_backend));
  if (st != LAMP_OK) return st;
  lamp_cuda_svc = svc;
  st = lamp_cuda_devices_open();
  if (st != LAMP_OK) return st;
  table = (lamp_backend){
      .memory = {"cuda", lamp_cuda_alloc, lamp_cuda_free, lamp_cuda_zero},
      .count = lamp_cuda_count,
      .upload = lamp_cuda_upload,
      .upload_async = lamp_cuda_upload_async,
      .download = lamp_cuda_download,
      .copy = lamp_cuda_copy,
      .synchronize = lamp_cuda_synchronize,
      .event_new = lamp_cuda_event_new,
      .event_free = lamp_cuda_event_free,
      .event_record = lamp_cuda_event_record,
      .event_wait = lamp_cuda_event_wait,
      .stream = lamp_cuda_stream_handle,
      .release_workspace = release_workspace,
      .select = lamp_cuda_select,
      .describe = lamp_cuda_describe,
      .graph_begin = lamp_cuda_graph_begin,
      .graph_end = lamp_cuda_graph_end,
      .graph_launch = lamp_cuda_graph_launch,
      .graph_free = lamp_cuda_graph_free,
  };
  table.caps |= LAMP_CAP_GRAPHS;
  lamp_cuda_fill_kernels(&table); /* with the caps its GEMM has */
  *out = &table;
  return LAMP_OK;
}
