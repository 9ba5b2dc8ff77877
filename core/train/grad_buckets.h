/*
** Gradient buckets: the gradient slab cut, from its end, into runs of whole parameters of about
** bucket_bytes each (DDP's bucket_cap_mb). The backward pass finishes parameters last layer
** first; as soon as every parameter of a bucket is final its all-reduce starts (non-blocking
** where the communicator has it), so communication overlaps the rest of the backward pass.
**
** On a device whose work is queued (a stream: cuda, the simulated device), with a communicator
** that orders collectives on it (all_reduce_enqueue), "starts" means "is queued": right after the
** bucket's backward kernels, so it runs while the rest of backward computes. finish then makes
** the stream wait for every bucket and polls for failures, never blocking the host; the
** collectives' outcome is known for sure once the host has waited for the stream (the step's
** report), and lamp_grad_buckets_confirm asks then.
**
** Sharded (ZeRO-1, `shard`): the slab, padded to a multiple of the rank count, is cut at
** multiples of it, so a bucket may end inside a parameter (it is ready once every parameter it
** overlaps is final), and each bucket is reduce-scattered instead: rank r receives the sum of
** its piece r, elements [offset + r piece, offset + (r + 1) piece), into the shard's gradient
** buffer. A rank's shard is the concatenation of its pieces, last bucket of the slab first.
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
  size_t piece;          /* sharded: count / world, the elements each rank owns */
  size_t shard_offset;   /* sharded: where this rank's piece sits in its shard */
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
  void *stream;              /* the device's queue, where the communicator orders its all-reduces; else NULL */
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
  int shard;                 /* reduce-scatter into shard_grads instead of all-reducing */
  size_t shard_numel;        /* sharded: elements this rank owns, padding included */
  float *shard_grads;        /* sharded: the summed gradients of this rank's pieces [shard_numel] */
} lamp_grad_buckets;

lamp_status lamp_grad_buckets_init(lamp_grad_buckets *b, const lamp_model *model, lamp_comm *comm,
                                   lamp_device device, size_t bucket_bytes, lamp_dtype compress, int shard);
void lamp_grad_buckets_free(lamp_grad_buckets *b);

/* Before a backward whose gradients are to be reduced. */
void lamp_grad_buckets_begin(lamp_grad_buckets *b, float *grads);

/* The model's grads_ready callback: parameters first_param.. are final. */
void lamp_grad_buckets_ready(void *ctx, size_t first_param);

/* After the backward: starts what is left, waits for every bucket (on the stream: queues the
   waits), returns the first error. */
lamp_status lamp_grad_buckets_finish(lamp_grad_buckets *b);

/* After the host has waited for the stream past a step's buckets: whether their collectives
   failed meanwhile (the communicator's poll). LAMP_OK at once off the stream. */
lamp_status lamp_grad_buckets_confirm(lamp_grad_buckets *b);

#endif
