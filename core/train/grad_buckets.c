#include "train/grad_buckets.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

lamp_status lamp_grad_buckets_init(lamp_grad_buckets *b, const lamp_model *model, lamp_comm *comm,
                                   lamp_device device, size_t bucket_bytes) {
  memset(b, 0, sizeof *b);
  b->comm = comm;
  b->device = device;
  b->nonblocking = lamp_comm_supports(comm, "all_reduce_start");
  size_t params = lamp_model_n_params(model);
  b->buckets = calloc(params ? params : 1, sizeof *b->buckets);
  if (b->buckets == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Trainer: out of memory for gradient buckets");
  /* Walk the parameters backwards, closing a bucket once it holds bucket_bytes. */
  size_t end = lamp_model_numel(model);
  for (size_t i = params; i-- > 0;) {
    const lamp_model_param *p = lamp_model_param_at(model, i);
    if ((end - p->offset) * sizeof(float) >= bucket_bytes || i == 0) {
      b->buckets[b->n++] = (lamp_grad_bucket){.first_param = i, .offset = p->offset, .count = end - p->offset};
      end = p->offset;
    }
  }
  return LAMP_OK;
}

void lamp_grad_buckets_free(lamp_grad_buckets *b) {
  free(b->buckets);
  b->buckets = NULL;
  b->n = 0;
}

void lamp_grad_buckets_begin(lamp_grad_buckets *b, float *grads) {
  b->grads = grads;
  b->next = 0;
  b->status = LAMP_OK;
  b->message[0] = '\0';
  b->started_early = 0;
}

static void note_failure(lamp_grad_buckets *b, lamp_status st) {
  if (st == LAMP_OK || b->status != LAMP_OK) return;
  b->status = st;
  strncpy(b->message, lamp_last_error(), sizeof b->message - 1);
  b->message[sizeof b->message - 1] = '\0';
}

static void start_bucket(lamp_grad_buckets *b, lamp_grad_bucket *k) {
  float *data = b->grads + k->offset;
  k->request = NULL;
  if (b->status != LAMP_OK) return; /* after a failure, nothing new is started */
  if (b->nonblocking)
    note_failure(b, lamp_comm_all_reduce_start(b->comm, data, k->count, LAMP_F32, LAMP_REDUCE_SUM, b->device,
                                               &k->request));
  else
    note_failure(b, lamp_comm_all_reduce(b->comm, data, k->count, LAMP_F32, LAMP_REDUCE_SUM, b->device));
}

void lamp_grad_buckets_ready(void *ctx, size_t first_param) {
  lamp_grad_buckets *b = ctx;
  while (b->next < b->n && b->buckets[b->next].first_param >= first_param) {
    start_bucket(b, &b->buckets[b->next++]);
    if (first_param > 0) b->started_early++;
  }
}

lamp_status lamp_grad_buckets_finish(lamp_grad_buckets *b) {
  lamp_grad_buckets_ready(b, 0);
  /* Every started request is waited for, even after a failure, so none is left in flight. */
  for (size_t i = 0; i < b->n; i++) {
    lamp_grad_bucket *k = &b->buckets[i];
    if (k->request == NULL) continue;
    note_failure(b, lamp_comm_wait(b->comm, k->request));
    k->request = NULL;
  }
  if (b->status != LAMP_OK) lamp_error(b->status, "%s", b->message);
  return b->status;
}
