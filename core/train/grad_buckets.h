/*
** Gradient buckets: the gradient slab cut, from its end, into runs of whole parameters of about
** bucket_bytes each (DDP's bucket_cap_mb). The backward pass finishes parameters last layer
** first; as soon as every parameter of a bucket is final its all-reduce starts (non-blocking
** where the communicator has it), so communication overlaps the rest of the backward pass.
*/
#ifndef LAMP_TRAIN_GRAD_BUCKETS_H
#define LAMP_TRAIN_GRAD_BUCKETS_H

#include <stddef.h>

#include "nn/model.h"
#include "plugin/instance.h"

typedef struct lamp_grad_bucket {
  size_t first_param; /* the bucket holds parameters first_param .. (the next bucket's - 1) */
  size_t offset;      /* elements into the slab */
  size_t count;
  lamp_request *request; /* in flight, or NULL */
} lamp_grad_bucket;

typedef struct lamp_grad_buckets {
  lamp_comm *comm;
  lamp_device device;
  float *grads;
  lamp_grad_bucket *buckets; /* from the end of the slab to its start */
  size_t n;
  size_t next;               /* the next bucket to start */
  int nonblocking;           /* the communicator has all_reduce_start/wait */
  lamp_status status;        /* the first failure of this step */
  char message[512];         /* and its message, restored into lamp_last_error by finish */
  size_t started_early;      /* buckets started while layers were still running backward */
  /* Wire compression (DDP's fp16/bf16 compress hooks): LAMP_F32 for none. Each rank's bucket,
     divided by the rank count, goes out rounded to this dtype through an all-gather, and every
     rank sums the contributions in fp32 in rank order, so all of them get the same bits. */
  lamp_dtype compress;
  int world;
  uint16_t *wire;            /* this rank's rounded bucket, then everyone's: world x largest bucket */
  float *widened;            /* one contribution widened back to fp32 */
} lamp_grad_buckets;

lamp_status lamp_grad_buckets_init(lamp_grad_buckets *b, const lamp_model *model, lamp_comm *comm,
                                   lamp_device device, size_t bucket_bytes, lamp_dtype compress);
void lamp_grad_buckets_free(lamp_grad_buckets *b);

/* Before a backward whose gradients are to be reduced. */
void lamp_grad_buckets_begin(lamp_grad_buckets *b, float *grads);

/* The model's grads_ready callback: parameters first_param.. are final. */
void lamp_grad_buckets_ready(void *ctx, size_t first_param);

/* After the backward: starts what is left, waits for every bucket, returns the first error. */
lamp_status lamp_grad_buckets_finish(lamp_grad_buckets *b);

#endif
