/*
** Graphs (backend.h's lamp_graph_begin): the core's stream captured into a CUDA graph, which is
** instantiated once and launched as often as the caller likes. A small network on a large GPU
** spends its step launching kernels; a graph launches them all with one call.
**
** CUDA itself refuses, while a stream is captured, the calls that would wait for the device, but
** it records stream-ordered allocations and frees into the graph, where every replay would repeat
** them. The module refuses those first, with a message naming the operation (memory.c, queue.c,
** through lamp_cuda_refuse_in_capture), holds frees back until the capture ends, and ends every
** capture it began, so that the stream is usable again whatever happened.
*/
#include <stdlib.h>

#include "backend/cuda/runtime.h"

static struct {
  int on;               /* the stream is being captured */
  const char *refused;  /* the first operation refused meanwhile (a string literal), or NULL */
  void **held;          /* frees asked for meanwhile, done when the capture ends */
  size_t n_held, cap_held;
} capture;

int lamp_cuda_capturing(void) { return capture.on; }

static lamp_status refusal(const char *what) {
  return lamp_cuda_svc->error(LAMP_ERR_INVALID_USAGE,
                              "cuda: %s while a graph is being captured (a replay would not repeat it)", what);
}

lamp_status lamp_cuda_refuse_in_capture(const char *what) {
  if (!capture.on) return LAMP_OK;
  if (capture.refused == NULL) capture.refused = what;
  return refusal(what);
}

int lamp_cuda_hold_free(void *ptr) {
  if (!capture.on) return 0;
  if (capture.n_held == capture.cap_held) {
    size_t cap = capture.cap_held ? 2 * capture.cap_held : 16;
    void **more = realloc(capture.held, cap * sizeof *more);
    if (more == NULL) { /* no host memory to hold it: freed into the graph, which is then refused */
      (void)lamp_cuda_refuse_in_capture("freeing device memory (no host memory to hold the free back)");
      return 0;
    }
    capture.held = more;
    capture.cap_held = cap;
  }
  capture.held[capture.n_held++] = ptr;
  return 1;
}

lamp_status lamp_cuda_graph_begin(void) {
  lamp_status st = lamp_cuda_activate();
  if (st != LAMP_OK) return st;
  if (capture.on) return lamp_cuda_svc->error(LAMP_ERR_INVALID_USAGE, "cuda: graph_begin: a graph is being captured already");
  /* Thread-local: only this thread's unsafe calls break the capture (lamp issues all its work
     from one thread; a library's thread is not ours to stop). */
  st = lamp_cuda_status(cudaStreamBeginCapture(lamp_cuda_stream(), cudaStreamCaptureModeThreadLocal),
                        "beginning a graph capture");
  capture.on = st == LAMP_OK;
  capture.refused = NULL;
  return st;
}

/* The frees held back during the capture, in stream order after everything captured before. */
static void free_held(void) {
  size_t n = capture.n_held;
  capture.n_held = 0;
  for (size_t i = 0; i < n; i++) lamp_cuda_free(capture.held[i]);
}

lamp_status lamp_cuda_graph_end(void **out) {
  *out = NULL;
  if (!capture.on) return lamp_cuda_svc->error(LAMP_ERR_INVALID_USAGE, "cuda: graph_end without graph_begin");
  cudaGraph_t graph = NULL;
  cudaError_t err = cudaStreamEndCapture(lamp_cuda_stream(), &graph);
  capture.on = 0;
  free_held();
  if (capture.refused != NULL) { /* told again: errors since may have replaced its message */
    if (graph != NULL) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return refusal(capture.refused);
  }
  lamp_status st = lamp_cuda_status(err, "ending a graph capture");
  cudaGraphExec_t exec = NULL;
  if (st == LAMP_OK) st = lamp_cuda_status(cudaGraphInstantiate(&exec, graph, 0), "instantiating a graph");
  if (graph != NULL) cudaGraphDestroy(graph); /* the executable graph keeps what it needs */
  if (st != LAMP_OK) return st;
  *out = exec;
  return LAMP_OK;
}

lamp_status lamp_cuda_graph_launch(void *graph) {
  lamp_status st = lamp_cuda_refuse_in_capture("graph_launch");
  if (st != LAMP_OK) return st;
  return lamp_cuda_status(cudaGraphLaunch((cudaGraphExec_t)graph, lamp_cuda_stream()), "launching a graph");
}

void lamp_cuda_graph_free(void *graph) {
  if (graph != NULL) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}
