/*
** CrossEntropy: the fused log-softmax + NLL kernel behind the loss vtable, plus the
** reference counting every loss shares. The kernel computes in fp32 whatever the logits'
** dtype; this file only checks that logits, labels and dlogits agree.
*/
#include <stdlib.h>

#include "backend/backend.h"
#include "base/error.h"
#include "nn/loss.h"
#include "tensor/dtype.h"

lamp_loss *lamp_loss_retain(lamp_loss *loss) {
  if (loss != NULL) loss->refcount++;
  return loss;
}

void lamp_loss_release(lamp_loss *loss) {
  if (loss == NULL || --loss->refcount > 0) return;
  loss->ops->destroy(loss);
}

static lamp_status check_logits(const lamp_tensor *logits) {
  char what[128];
  if (logits->ndim == 2 && lamp_dtype_is_float(logits->dtype) && lamp_tensor_is_contiguous(logits)) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG,
                    "CrossEntropy: logits %s must be a contiguous f32, f16 or bf16 tensor [batch, classes]",
                    lamp_tensor_describe(logits, what, sizeof what));
}

static lamp_status check_labels(const lamp_tensor *labels, const lamp_tensor *logits) {
  char what[128], lw[128];
  if (labels->dtype == LAMP_I32 && labels->ndim == 1 && labels->shape[0] == logits->shape[0] &&
      lamp_tensor_is_contiguous(labels))
    return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "CrossEntropy: labels %s do not match logits %s (expected i32[%lld])",
                    lamp_tensor_describe(labels, what, sizeof what), lamp_tensor_describe(logits, lw, sizeof lw),
                    (long long)logits->shape[0]);
}

static lamp_status check_dlogits(const lamp_tensor *dlogits, const lamp_tensor *logits) {
  char what[128], lw[128];
  if (dlogits->ndim == 2 && dlogits->shape[0] == logits->shape[0] && dlogits->shape[1] == logits->shape[1] &&
      lamp_dtype_is_float(dlogits->dtype) && lamp_tensor_is_contiguous(dlogits))
    return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG,
                    "CrossEntropy: dlogits %s must be a contiguous floating-point tensor shaped like logits %s",
                    lamp_tensor_describe(dlogits, what, sizeof what), lamp_tensor_describe(logits, lw, sizeof lw));
}

static lamp_status ce_forward_backward(lamp_loss *loss, const lamp_exec *exec, const lamp_tensor *logits,
                                       const lamp_tensor *labels, float grad_scale, double *value,
                                       lamp_tensor *dlogits, size_t *correct) {
  (void)loss;
  lamp_status st = check_logits(logits);
  if (st == LAMP_OK) st = check_labels(labels, logits);
  if (st == LAMP_OK && dlogits != NULL) st = check_dlogits(dlogits, logits);
  if (st != LAMP_OK) return st;
  if (logits->shape[0] == 0) return lamp_error(LAMP_ERR_INVALID_ARG, "CrossEntropy: empty batch (the mean of no rows)");
  return lamp_cross_entropy(exec->device, lamp_tensor_data(logits), logits->dtype, lamp_tensor_data(labels),
                            (size_t)logits->shape[0], (size_t)logits->shape[1], grad_scale, value,
                            dlogits ? lamp_tensor_data(dlogits) : NULL, dlogits ? dlogits->dtype : LAMP_F32,
                            correct);
}

static void ce_destroy(lamp_loss *loss) { free(loss); }

static const lamp_loss_ops cross_entropy_ops = {
    .type = "CrossEntropy",
    .forward_backward = ce_forward_backward,
    .destroy = ce_destroy,
};

lamp_status lamp_cross_entropy_new(lamp_loss **out) {
  *out = NULL;
  lamp_loss *loss = calloc(1, sizeof *loss);
  if (loss == NULL) return lamp_error(LAMP_ERR_SYSTEM, "CrossEntropy: out of memory");
  loss->ops = &cross_entropy_ops;
  loss->refcount = 1;
  *out = loss;
  return LAMP_OK;
}
