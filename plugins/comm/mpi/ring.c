/* Ring collectives over MPI point-to-point messages: see ring.h. */
#include <stdint.h>
#include <string.h>

#include "ring.h"

static int wrap(int i, int n) { return ((i % n) + n) % n; }

static int has_reduce_scatter(const mpi_ring *r) { return r->kind != MPI_RING_ALL_GATHER; }

/* The reduce-scatter's steps come first; the rest are the all-gather's. */
static int in_reduce_scatter(const mpi_ring *r) { return has_reduce_scatter(r) && r->step < r->size - 1; }

static int gather_step(const mpi_ring *r) { return has_reduce_scatter(r) ? r->step - (r->size - 1) : r->step; }

static size_t chunk_start(const mpi_ring *r, int i) {
  return r->kind == MPI_RING_ALL_REDUCE ? r->total * (size_t)i / (size_t)r->size : r->block * (size_t)i;
}

static size_t chunk_length(const mpi_ring *r, int i) { return chunk_start(r, i + 1) - chunk_start(r, i); }

/* A reduce_scatter whose output lies outside its input receives its last chunk straight into the
   output and adds its own part there, instead of into the scratch and then copying. */
static int last_into_dst(const mpi_ring *r) {
  if (r->kind != MPI_RING_REDUCE_SCATTER || r->step != r->size - 2) return 0;
  uintptr_t dst = (uintptr_t)r->dst, src = (uintptr_t)r->src;
  return dst + r->block * r->elem <= src || dst >= src + r->total * r->elem;
}

size_t mpi_ring_scratch_bytes(mpi_ring_kind kind, size_t total, int size, size_t elem) {
  if (kind == MPI_RING_ALL_GATHER || size < 2) return 0;
  size_t largest = (total + (size_t)size - 1) / (size_t)size; /* total * i / size steps by at most this */
  return largest * elem * (size > 2 ? 2u : 1u); /* step s receives while step s - 1's chunk is sent on */
}

static int post_step(mpi_ring *r) {
  int right = wrap(r->rank + 1, r->size), left = wrap(r->rank - 1, r->size);
  const char *send;
  char *recv;
  size_t n_send, n_recv;
  if (in_reduce_scatter(r)) {
    int s = r->step, cs = wrap(r->rank - s - 1, r->size), cr = wrap(r->rank - s - 2, r->size);
    send = s == 0 ? r->src + chunk_start(r, cs) * r->elem : r->scratch[(s - 1) & 1];
    recv = last_into_dst(r) ? r->dst : r->scratch[s & 1];
    n_send = chunk_length(r, cs);
    n_recv = chunk_length(r, cr);
  } else {
    int s = gather_step(r), cs = wrap(r->rank - s, r->size), cr = wrap(r->rank - s - 1, r->size);
    send = r->dst + chunk_start(r, cs) * r->elem;
    recv = r->dst + chunk_start(r, cr) * r->elem;
    n_send = chunk_length(r, cs);
    n_recv = chunk_length(r, cr);
  }
  int rc = MPI_Irecv(recv, (int)n_recv, r->type, left, r->tag, r->comm, &r->req[1]);
  if (rc == MPI_SUCCESS) rc = MPI_Isend(send, (int)n_send, r->type, right, r->tag, r->comm, &r->req[0]);
  return rc;
}

/*
** The chunk received in a reduce-scatter step gets this rank's part: a partial sum travels on
** in the scratch; in the last step the chunk is the rank's own, and its sum goes to dst.
** MPI_Reduce_local(in, inout) computes inout = in op inout.
*/
static int finish_reduce_step(mpi_ring *r) {
  int s = r->step, cr = wrap(r->rank - s - 2, r->size);
  char *got = r->scratch[s & 1];
  size_t n = chunk_length(r, cr);
  const char *own = r->src + chunk_start(r, cr) * r->elem;
  if (s < r->size - 2) return MPI_Reduce_local(own, got, (int)n, r->type, r->op);
  if (last_into_dst(r)) return MPI_Reduce_local(own, r->dst, (int)n, r->type, r->op);
  char *out = r->kind == MPI_RING_ALL_REDUCE ? r->dst + chunk_start(r, cr) * r->elem : r->dst;
  if (out != own) memcpy(out, own, n * r->elem); /* distinct blocks: cr == rank, out is block 0 */
  return MPI_Reduce_local(got, out, (int)n, r->type, r->op);
}

int mpi_ring_start(mpi_ring *r, mpi_ring_kind kind, MPI_Comm comm, int tag, MPI_Datatype type, MPI_Op op,
                   size_t elem, const void *src, void *dst, size_t total, void *scratch) {
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->comm = comm;
  r->tag = tag;
  r->type = type;
  r->op = op;
  r->elem = elem;
  r->src = src;
  r->dst = dst;
  r->total = total;
  r->req[0] = r->req[1] = MPI_REQUEST_NULL;
  int rc = MPI_Comm_rank(comm, &r->rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm, &r->size);
  if (rc != MPI_SUCCESS) return rc;
  r->block = total / (size_t)r->size;
  size_t half = mpi_ring_scratch_bytes(kind, total, r->size, elem) / (r->size > 2 ? 2u : 1u);
  r->scratch[0] = scratch;
  r->scratch[1] = r->size > 2 ? (char *)scratch + half : scratch;
  r->steps = (kind == MPI_RING_ALL_REDUCE ? 2 : 1) * (r->size - 1);
  if (r->steps > 0) return post_step(r);
  if (kind == MPI_RING_REDUCE_SCATTER && r->dst != r->src) memcpy(r->dst, r->src, total * elem); /* one rank */
  return MPI_SUCCESS;
}

int mpi_ring_next(mpi_ring *r, int *done) {
  *done = 0;
  int rc = MPI_SUCCESS;
  if (r->step < r->steps) {
    if (in_reduce_scatter(r)) rc = finish_reduce_step(r);
    if (rc != MPI_SUCCESS) return rc;
    if (++r->step < r->steps) return post_step(r);
  }
  *done = 1;
  return MPI_SUCCESS;
}
