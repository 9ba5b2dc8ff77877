#include "train/grad_buckets.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "tensor/dtype.h"
#include "tensor/memory.h"

/* The compressed path's buffers, sized for the largest bucket. */
static lamp_status alloc_wire(lamp_grad_buckets *b) {
  size_t largest = 0;
  for (size_t i = 0; i < b->n; i++)
    if (b->buckets[i].count > largest) largest = b->buckets[i].count;
  b->wire = lamp_mem_alloc(b->device, LAMP_MEM_WORKSPACE, largest * (size_t)(b->world + 1) * sizeof *b->wire);
  b->widened = lamp_mem_alloc(b->device, LAMP_MEM_WORKSPACE, largest * sizeof *b->widened);
  return b->wire != NULL && b->widened != NULL ? LAMP_OK : LAMP_ERR_SYSTEM;
}

/* The parameter holding element e of the slab, searched down from parameter i. */
static size_t param_holding(const lamp_model *model, size_t i, size_t e) {
  while (i > 0 && lamp_model_param_at(model, i)->offset > e) i--;
  return i;
}

/*
** Sharded: from the padded end, buckets of about bucket_bytes whose bounds are multiples of the
** rank count, each cut into one piece per rank; the shard gradient buffer holds this rank's.
*/
static lamp_status cut_shards(lamp_grad_buckets *b, const lamp_model *model, size_t bucket_bytes) {
  size_t params = lamp_model_n_params(model), world = (size_t)b->world;
  size_t end = lamp_model_slab_numel(model);
  for (size_t i = params; i-- > 0 && end > 0;) {
    const lamp_model_param *p = lamp_model_param_at(model, i);
    if (p->offset >= end && i > 0) continue; /* inside the bucket cut last */
    if ((end - p->offset) * sizeof(float) < bucket_bytes && i > 0) continue;
    size_t cut = i == 0 ? 0 : p->offset - p->offset % world;
    b->buckets[b->n++] = (lamp_grad_bucket){.first_param = param_holding(model, i, cut), .offset = cut,
                                            .count = end - cut, .piece = (end - cut) / world,
                                            .shard_offset = b->shard_numel};
    b->shard_numel += (end - cut) / world;
    end = cut;
  }
  b->shard_grads = lamp_mem_alloc(b->device, LAMP_MEM_GRADS, (b->shard_numel ? b->shard_numel : 1) * sizeof(float));
  return b->shard_grads != NULL ? LAMP_OK : LAMP_ERR_SYSTEM;
}

lamp_status lamp_grad_buckets_init(lamp_grad_buckets *b, const lamp_model *model, lamp_comm *comm,
                                   lamp_device device, size_t bucket_bytes, lamp_dtype compress, int shard) {
  memset(b, 0, sizeof *b);
  b->comm = comm;
  b->device = device;
  b->compress = compress;
  b->world = lamp_comm_size(comm);
  if (!lamp_dtype_is_float(compress))
    return lamp_error(LAMP_ERR_INVALID_ARG, "Trainer: compress must be f16 or bf16 (or none), got %s",
                      lamp_dtype_name(compress));
  if (compress != LAMP_F32 && b->world > 1 && !lamp_comm_supports(comm, "all_gather"))
    return lamp_error(LAMP_ERR_UNSUPPORTED, "Trainer: compress = %s needs a communicator with all_gather; %s has none",
                      lamp_dtype_name(compress), lamp_comm_handle(comm)->desc->name);
  b->shard = shard;
  b->nonblocking = !shard && compress == LAMP_F32 && lamp_comm_supports(comm, "all_reduce_start");
  if (!shard && compress == LAMP_F32 && lamp_comm_supports(comm, "all_reduce_enqueue"))
    b->stream = lamp_device_stream(device);
  size_t params = lamp_model_n_params(model);
  b->buckets = calloc(params ? params : 1, sizeof *b->buckets);
  if (b->buckets == NULL) return lamp_error(LAMP_ERR_SYSTEM, "Trainer: out of memory for gradient buckets");
  if (shard) return cut_shards(b, model, bucket_bytes);
  /* Walk the parameters backwards, closing a bucket once it holds bucket_bytes. */
  size_t end = lamp_model_numel(model);
  for (size_t i = params; i-- > 0;) {
    const lamp_model_param *p = lamp_model_param_at(model, i);
    if ((end - p->offset) * sizeof(float) >= bucket_bytes || i == 0) {
      b->buckets[b->n++] = (lamp_grad_bucket){.first_param = i, .offset = p->offset, .count = end - p->offset};
      end = p->offset;
    }
  }
  return compress != LAMP_F32 && b->world > 1 ? alloc_wire(b) : LAMP_OK;
}

void lamp_grad_buckets_free(lamp_grad_buckets *b) {
  lamp_mem_free(b->wire);
  lamp_mem_free(b->widened);
  lamp_mem_free(b->shard_grads);
  b->wire = NULL;
  b->widened = NULL;
  b->shard_grads = NULL;
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

/*
** The compressed reduction of one bucket: out goes data / world rounded to 16 bits (dividing
** first keeps fp16 from overflowing where the sum would not), back come everyone's, summed in
** fp32 in rank order, times world again, because the optimizer divides by the rank count.
*/
static lamp_status reduce_compressed(lamp_grad_buckets *b, float *data, size_t count) {
  uint16_t *mine = b->wire, *all = b->wire + count;
  lamp_status st = lamp_scale(b->device, data, count, 1.0f / (float)b->world);
  if (st == LAMP_OK) st = lamp_convert(b->device, mine, b->compress, data, LAMP_F32, count);
  if (st == LAMP_OK) st = lamp_comm_all_gather(b->comm, mine, all, count, b->compress, b->device);
  if (st == LAMP_OK) st = lamp_fill(b->device, data, LAMP_F32, count, 0.0f);
  for (int r = 0; st == LAMP_OK && r < b->world; r++) {
    st = lamp_convert(b->device, b->widened, LAMP_F32, all + (size_t)r * count, b->compress, count);
    if (st == LAMP_OK) st = lamp_axpy(b->device, data, b->widened, count, 1.0f);
  }
  if (st == LAMP_OK) st = lamp_scale(b->device, data, count, (float)b->world);
  return st;
}

static void start_bucket(lamp_grad_buckets *b, lamp_grad_bucket *k) {
  float *data = b->grads + k->offset;
  k->request = NULL;
  if (b->status != LAMP_OK) return; /* after a failure, nothing new is started */
  if (b->shard) { /* MPI forbids aliasing: the sums land in the shard's own buffer */
    note_failure(b, lamp_comm_reduce_scatter(b->comm, data, b->shard_grads + k->shard_offset, k->piece, LAMP_F32,
                                             LAMP_REDUCE_SUM, b->device));
    return;
  }
  if (b->compress != LAMP_F32) {
    note_failure(b, reduce_compressed(b, data, k->count));
    return;
  }
  if (b->stream != NULL)
    note_failure(b, lamp_comm_all_reduce_enqueue(b->comm, data, k->count, LAMP_F32, LAMP_REDUCE_SUM, b->device,
                                                 b->stream, &k->request));
  else if (b->nonblocking)
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
    if (b->stream != NULL) note_failure(b, lamp_comm_wait_stream(b->comm, k->request, b->stream));
    else note_failure(b, lamp_comm_wait(b->comm, k->request));
    k->request = NULL;
  }
  /* A collective that failed already says so now; one failing later, at confirm. */
  if (b->stream != NULL && b->status == LAMP_OK) note_failure(b, lamp_comm_poll(b->comm));
  if (b->status != LAMP_OK) lamp_error(b->status, "%s", b->message);
  return b->status;
}

lamp_status lamp_grad_buckets_confirm(lamp_grad_buckets *b) {
  return b->stream != NULL ? lamp_comm_poll(b->comm) : LAMP_OK;
}
