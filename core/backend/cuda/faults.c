/*
** Faults the kernels find in their arguments on the device (a cross-entropy label out of
** range: the labels are device memory, so the host cannot look at them before the launch).
** CUDA reports its own errors at the next wait; these are reported at the same moment, by the
** runtime calling lamp_cuda_kernel_faults after each successful wait, from a record in pinned
** host memory mapped into the device (fault_record.h). No copy is queued and no
** extra synchronisation is made: the host reads memory the finished kernels already wrote.
*/
#include "backend/cuda/cudnn_lib.h"
#include "backend/cuda/kernels.h"

static lamp_cuda_fault *record;        /* host view */
static lamp_cuda_fault *record_device; /* the same memory, as the device addresses it */

lamp_status lamp_cuda_fault_record(lamp_cuda_fault **device_view) {
  if (record == NULL) {
    void *host = NULL, *device = NULL;
    lamp_status s = lamp_cuda_status(cudaHostAlloc(&host, sizeof *record, cudaHostAllocMapped),
                                     "the kernels' fault record (cudaHostAlloc)");
    if (s != LAMP_OK) return s;
    s = lamp_cuda_status(cudaHostGetDevicePointer(&device, host, 0),
                         "the kernels' fault record (cudaHostGetDevicePointer)");
    if (s != LAMP_OK) {
      cudaFreeHost(host);
      return s;
    }
    record = host;
    record_device = device;
    record->raised = record->reported = 0;
  }
  *device_view = record_device;
  return LAMP_OK;
}

lamp_status lamp_cuda_kernel_faults(void) {
  if (record == NULL) return LAMP_OK;
  int label;
  size_t row, classes;
  if (!lamp_cuda_fault_take(record, &label, &row, &classes)) return LAMP_OK;
  return lamp_cuda_svc->error(LAMP_ERR_INVALID_ARG, LAMP_CUDA_FAULT_LABEL_FORMAT, label, row, classes);
}

void lamp_cuda_kernels_release(void) {
  lamp_cuda_gemm_release();
  lamp_cudnn_release();
  if (record != NULL) cudaFreeHost(record);
  record = record_device = NULL;
}
