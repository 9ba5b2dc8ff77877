/*
** The runtime side of the CUDA module (module.c, status.c, device.c, memory.c, queue.c): what its
** files share beyond cuda_impl.h. The device is put to use lazily: opening the module only counts
** the devices, so that choosing cuda:1 never leaves a context on device 0; the first allocation,
** copy or event activates the chosen device (makes it current, creates the stream, sets up the
** memory pool), and from then on the choice is fixed.
*/
#ifndef LAMP_BACKEND_CUDA_RUNTIME_H
#define LAMP_BACKEND_CUDA_RUNTIME_H

#include "backend/cuda/cuda_impl.h"

/* ---- devices (device.c) ---------------------------------------------------------------------- */

/* Counts the devices (cudaGetDeviceCount): LAMP_OK with at least one, else why not (no driver,
   a driver too old, no device), in CUDA's words. */
lamp_status lamp_cuda_devices_open(void);
int lamp_cuda_count(void);
/* The chosen device (0 unless selected). */
int lamp_cuda_ordinal(void);
/* The table's select: refused once another device is active. */
lamp_status lamp_cuda_select(int ordinal);
lamp_status lamp_cuda_describe(int ordinal, lamp_device_info *out);
/* Activates the chosen device on first call; then LAMP_OK at once (or the kept failure). */
lamp_status lamp_cuda_activate(void);
/* Whether lamp_cuda_activate has succeeded (nothing to release before). */
int lamp_cuda_is_active(void);

/* ---- memory (memory.c) ----------------------------------------------------------------------- */

/* Sets up the device's stream-ordered pool (called by lamp_cuda_activate). */
lamp_status lamp_cuda_pool_open(int ordinal);
void *lamp_cuda_alloc(size_t bytes);
void lamp_cuda_free(void *ptr);
lamp_status lamp_cuda_zero(void *ptr, size_t bytes);
/* Frees the scratch buffer and the pinned staging (release_workspace). */
void lamp_cuda_memory_release(void);

/* ---- the queue (queue.c) --------------------------------------------------------------------- */

/* Creates the stream (called by lamp_cuda_activate). */
lamp_status lamp_cuda_queue_open(void);
lamp_status lamp_cuda_upload(void *dst, const void *host_src, size_t bytes);
lamp_status lamp_cuda_upload_async(void *dst, const void *host_src, size_t bytes);
lamp_status lamp_cuda_download(void *host_dst, const void *src, size_t bytes);
lamp_status lamp_cuda_copy(void *dst, const void *src, size_t bytes);
lamp_status lamp_cuda_synchronize(void);
lamp_status lamp_cuda_event_new(void **event);
void lamp_cuda_event_free(void *event);
lamp_status lamp_cuda_event_record(void *event);
lamp_status lamp_cuda_event_wait(void *event);
void *lamp_cuda_stream_handle(void);
/* Frees the pinned staging ring (after its copies are done). */
void lamp_cuda_queue_release(void);

/* ---- graphs (graph.c) ------------------------------------------------------------------------ */

lamp_status lamp_cuda_graph_begin(void);
lamp_status lamp_cuda_graph_end(void **graph);
lamp_status lamp_cuda_graph_launch(void *graph);
void lamp_cuda_graph_free(void *graph);
/* While capturing, a free is held back until the capture ends (1) rather than recorded into the
   graph; 0 when not capturing: free it now. */
int lamp_cuda_hold_free(void *ptr);

#endif
