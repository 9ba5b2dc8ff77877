/* Losses: logits and integer labels in, a scalar and the gradient w.r.t. the logits out. */
#ifndef LAMP_NN_LOSS_H
#define LAMP_NN_LOSS_H

#include "nn/layer.h"

typedef struct lamp_loss lamp_loss;

typedef struct lamp_loss_ops {
  const char *type; /* "CrossEntropy" */
  /*
  ** loss = mean over rows; dlogits (may be NULL) receives d(grad_scale * loss)/dlogits in
  ** its own dtype; correct (may be NULL) the count of rows whose argmax is the label.
  ** Computed in fp32 whatever the logits' dtype. value and correct are memory of exec->device,
  ** like the tensors (the host's on the CPU): a device's loss is read back with lamp_copy.
  */
  lamp_status (*forward_backward)(lamp_loss *loss, const lamp_exec *exec, const lamp_tensor *logits,
                                  const lamp_tensor *labels, float grad_scale, double *value,
                                  lamp_tensor *dlogits, size_t *correct);
  void (*destroy)(lamp_loss *loss);
} lamp_loss_ops;

struct lamp_loss {
  const lamp_loss_ops *ops;
  int refcount;
};

lamp_loss *lamp_loss_retain(lamp_loss *loss);
void lamp_loss_release(lamp_loss *loss);

/* Fused log-softmax + NLL; labels are an i32 tensor [rows]. */
lamp_status lamp_cross_entropy_new(lamp_loss **out);

#endif
