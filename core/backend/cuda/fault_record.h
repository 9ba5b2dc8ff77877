/*
** The record through which kernels report a bad argument they find on the device (a
** cross-entropy label out of range: labels are device memory, so the host cannot check them
** before the launch). It lives in pinned host memory mapped into the device (faults.c): kernels
** write it, and the host reads it after a wait, with no copy and no extra synchronisation.
**
** The protocol: a fault is recorded only while no earlier one waits to be reported
** (raised == reported): the details are written, then raised = reported + 1. The host takes a
** fault only while raised != reported: it reads the details, then sets reported = raised. Each
** side writes only its own counter, so neither needs an atomic across the bus, and the first
** fault since the last report wins, as the first CUDA error does.
**
** Plain C (no CUDA headers) so that tests/unit/test_cuda_math.c runs the protocol and the
** message on the CPU.
*/
#ifndef LAMP_BACKEND_CUDA_FAULT_RECORD_H
#define LAMP_BACKEND_CUDA_FAULT_RECORD_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define LAMP_FAULT_FN static inline __host__ __device__
#else
#define LAMP_FAULT_FN static inline
#endif

typedef struct lamp_cuda_fault {
  volatile uint32_t raised;   /* written by the device */
  volatile uint32_t reported; /* written by the host */
  volatile int32_t label;     /* cross_entropy: the label out of range ... */
  volatile uint32_t unused;
  volatile uint64_t row;      /* ... its row ... */
  volatile uint64_t classes;  /* ... and the class count it broke */
} lamp_cuda_fault;

/* The CPU backend's words for it (core/backend/cpu/cross_entropy.c): label, row, classes. */
#define LAMP_CUDA_FAULT_LABEL_FORMAT "cross_entropy: label %d at row %zu is outside [0, %zu)"

/* The kernel's side (one thread): records the fault unless an earlier one is pending. */
LAMP_FAULT_FN void lamp_cuda_fault_raise(lamp_cuda_fault *f, int32_t label, uint64_t row, uint64_t classes) {
  if (f->raised != f->reported) return; /* an earlier fault is still to be reported: it wins */
  f->label = label;
  f->row = row;
  f->classes = classes;
#ifdef __CUDA_ARCH__
  __threadfence_system(); /* the details reach the host before the count that announces them */
#endif
  f->raised = f->reported + 1u;
}

/* The host's side: 1 and the details when a fault is pending (it is then reported), else 0. */
LAMP_FAULT_FN int lamp_cuda_fault_take(lamp_cuda_fault *f, int *label, size_t *row, size_t *classes) {
  uint32_t raised = f->raised;
  if (raised == f->reported) return 0;
  *label = f->label;
  *row = (size_t)f->row;
  *classes = (size_t)f->classes;
  f->reported = raised;
  return 1;
}

#endif
