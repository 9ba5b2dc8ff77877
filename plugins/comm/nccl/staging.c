/*
** Host buffers (the trainer's small agreement and broadcast calls, anything on a CPU run) through
** device memory: NCCL moves device memory only. A piece at a time goes into the pinned buffer,
** up to the device buffer, through the collective and back, all queued on the communication
** stream; the host then waits for the piece's completion event against its deadline. Pinned
** memory keeps every copy asynchronous: a copy from pageable memory could block the host behind
** a collective that never ends, outside any deadline.
*/
#include <string.h>

#include "nccl_impl.h"

size_t nccl_dtype_size(lamp_dtype dtype) {
  switch (dtype) {
  case LAMP_F32:
  case LAMP_I32: return 4;
  case LAMP_F16:
  case LAMP_BF16: return 2;
  case LAMP_U8: return 1;
  default: return 0;
  }
}

ncclDataType_t nccl_dtype(lamp_dtype dtype) {
  switch (dtype) {
  case LAMP_F16: return ncclFloat16;
  case LAMP_BF16: return ncclBfloat16;
  case LAMP_I32: return ncclInt32;
  case LAMP_U8: return ncclUint8;
  default: return ncclFloat32;
  }
}

ncclRedOp_t nccl_reduce_op(lamp_reduce_op op) {
  switch (op) {
  case LAMP_REDUCE_MAX: return ncclMax;
  case LAMP_REDUCE_MIN: return ncclMin;
  default: return ncclSum;
  }
}

/* Starts a piece: takes the lock, numbers the collective. LAMP_OK with the lock held. */
static lamp_status piece_begin(nccl_comm *m, int64_t *seq) {
  pthread_mutex_lock(&m->lock);
  if (atomic_load(&m->broken)) {
    pthread_mutex_unlock(&m->lock);
    return nccl_broken_error(m);
  }
  *seq = ++m->seq;
  return LAMP_OK;
}

/* Queues the copy of `bytes` at `dev` into the pinned buffer at `host`, the completion event,
   then releases the lock and waits. */
static lamp_status piece_end(nccl_comm *m, const char *name, int64_t seq, void *host, const void *dev,
                             size_t bytes) {
  nccl_op *op = NULL;
  cudaError_t err = cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, m->stream);
  lamp_status st = err != cudaSuccess ? nccl_cuda_failed_locked(m, name, seq, err)
                                      : nccl_track_locked(m, name, seq, &op);
  pthread_mutex_unlock(&m->lock);
  return st == LAMP_OK ? nccl_op_wait(m, op) : st;
}

/* Holds lock: the copy of `bytes` from the pinned buffer up to the device. */
static lamp_status upload_locked(nccl_comm *m, const char *name, int64_t seq, void *dev, const void *host,
                                 size_t bytes) {
  cudaError_t err = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, m->stream);
  return err == cudaSuccess ? LAMP_OK : nccl_cuda_failed_locked(m, name, seq, err);
}

lamp_status nccl_staged_all_reduce(nccl_comm *m, const char *name, void *buf, size_t count, lamp_dtype dtype,
                                   lamp_reduce_op op) {
  size_t es = nccl_dtype_size(dtype), per = NCCL_STAGE_BYTES / es;
  for (size_t off = 0; off < count; off += per) {
    size_t n = count - off < per ? count - off : per;
    int64_t seq = 0;
    lamp_status st = piece_begin(m, &seq);
    if (st != LAMP_OK) return st;
    memcpy(m->stage_host, (char *)buf + off * es, n * es);
    st = upload_locked(m, name, seq, m->stage_dev, m->stage_host, n * es);
    if (st == LAMP_OK)
      st = nccl_settle_locked(m,
                              m->lib->all_reduce(m->stage_dev, m->stage_dev, n, nccl_dtype(dtype),
                                                 nccl_reduce_op(op), m->comm, m->stream),
                              name, seq);
    if (st != LAMP_OK) {
      pthread_mutex_unlock(&m->lock);
      return st;
    }
    st = piece_end(m, name, seq, m->stage_host, m->stage_dev, n * es);
    if (st != LAMP_OK) return st;
    memcpy((char *)buf + off * es, m->stage_host, n * es);
  }
  return LAMP_OK;
}

lamp_status nccl_staged_broadcast(nccl_comm *m, void *buf, size_t count, lamp_dtype dtype, int root) {
  size_t es = nccl_dtype_size(dtype), per = NCCL_STAGE_BYTES / es;
  for (size_t off = 0; off < count; off += per) {
    size_t n = count - off < per ? count - off : per;
    int64_t seq = 0;
    lamp_status st = piece_begin(m, &seq);
    if (st != LAMP_OK) return st;
    if (m->rank == root) {
      memcpy(m->stage_host, (char *)buf + off * es, n * es);
      st = upload_locked(m, "broadcast", seq, m->stage_dev, m->stage_host, n * es);
    }
    if (st == LAMP_OK)
      st = nccl_settle_locked(
          m, m->lib->broadcast(m->stage_dev, m->stage_dev, n, nccl_dtype(dtype), root, m->comm, m->stream),
          "broadcast", seq);
    if (st != LAMP_OK) {
      pthread_mutex_unlock(&m->lock);
      return st;
    }
    st = piece_end(m, "broadcast", seq, m->stage_host, m->stage_dev, n * es);
    if (st != LAMP_OK) return st;
    if (m->rank != root) memcpy((char *)buf + off * es, m->stage_host, n * es);
  }
  return LAMP_OK;
}

lamp_status nccl_staged_all_gather(nccl_comm *m, const void *send, void *recv, size_t count, lamp_dtype dtype) {
  /* Each piece: k elements of ours at the start of the buffers, the size * k gathered after. */
  size_t es = nccl_dtype_size(dtype), size = (size_t)m->size;
  size_t per = NCCL_STAGE_BYTES / (es * (size + 1));
  if (per == 0)
    return m->host->set_error(m->ctx, LAMP_ERR_UNSUPPORTED,
                              "all_gather: %d ranks do not fit the %zu-byte staging buffer for host memory",
                              m->size, NCCL_STAGE_BYTES);
  char *dev_out = (char *)m->stage_dev + per * es, *host_out = (char *)m->stage_host + per * es;
  for (size_t off = 0; off < count; off += per) {
    size_t n = count - off < per ? count - off : per;
    int64_t seq = 0;
    lamp_status st = piece_begin(m, &seq);
    if (st != LAMP_OK) return st;
    /* send may lie inside recv (in place): it is read here, before any of recv is written. */
    memcpy(m->stage_host, (const char *)send + off * es, n * es);
    st = upload_locked(m, "all_gather", seq, m->stage_dev, m->stage_host, n * es);
    if (st == LAMP_OK)
      st = nccl_settle_locked(m, m->lib->all_gather(m->stage_dev, dev_out, n, nccl_dtype(dtype), m->comm, m->stream),
                              "all_gather", seq);
    if (st != LAMP_OK) {
      pthread_mutex_unlock(&m->lock);
      return st;
    }
    st = piece_end(m, "all_gather", seq, host_out, dev_out, size * n * es);
    if (st != LAMP_OK) return st;
    for (size_t r = 0; r < size; r++)
      memcpy((char *)recv + (r * count + off) * es, host_out + r * n * es, n * es);
  }
  return LAMP_OK;
}

lamp_status nccl_staged_reduce_scatter(nccl_comm *m, const void *send, void *recv, size_t count, lamp_dtype dtype,
                                       lamp_reduce_op op) {
  /* Each piece: elements [off, off + k) of every rank's block of send, one block after the
     other at the start of the buffers, and the k summed elements of ours after them. */
  size_t es = nccl_dtype_size(dtype), size = (size_t)m->size;
  size_t per = NCCL_STAGE_BYTES / (es * (size + 1));
  if (per == 0)
    return m->host->set_error(m->ctx, LAMP_ERR_UNSUPPORTED,
                              "reduce_scatter: %d ranks do not fit the %zu-byte staging buffer for host memory",
                              m->size, NCCL_STAGE_BYTES);
  for (size_t off = 0; off < count; off += per) {
    size_t n = count - off < per ? count - off : per;
    char *dev_out = (char *)m->stage_dev + size * n * es, *host_out = (char *)m->stage_host + size * n * es;
    int64_t seq = 0;
    lamp_status st = piece_begin(m, &seq);
    if (st != LAMP_OK) return st;
    for (size_t r = 0; r < size; r++)
      memcpy((char *)m->stage_host + r * n * es, (const char *)send + (r * count + off) * es, n * es);
    st = upload_locked(m, "reduce_scatter", seq, m->stage_dev, m->stage_host, size * n * es);
    if (st == LAMP_OK)
      st = nccl_settle_locked(m,
                              m->lib->reduce_scatter(m->stage_dev, dev_out, n, nccl_dtype(dtype), nccl_reduce_op(op),
                                                     m->comm, m->stream),
                              "reduce_scatter", seq);
    if (st != LAMP_OK) {
      pthread_mutex_unlock(&m->lock);
      return st;
    }
    st = piece_end(m, "reduce_scatter", seq, host_out, dev_out, n * es);
    if (st != LAMP_OK) return st;
    memcpy((char *)recv + off * es, host_out, n * es);
  }
  return LAMP_OK;
}
