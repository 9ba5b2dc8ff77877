/*
** Ring collectives over MPI point-to-point messages, for the large buffers of data-parallel
** training (the gradient all-reduce, ZeRO-1's reduce-scatter and all-gather).
**
** Why not MPI's own: the mpi communicator needs every call non-blocking (its deadlines poll),
** and OpenMPI 4.1's non-blocking collectives (libnbc) are slow on large buffers: on two ranks of
** one machine MPI_Iallreduce of 7.45 MB took 2.9 ms where the blocking MPI_Allreduce took 1.1 ms,
** and MPI_Ireduce_scatter_block plus MPI_Iallgather 2.1 ms. A ring moves each element once per
** step through the shared-memory transport (one copy, by the kernel, for large messages) and
** reduces it with MPI_Reduce_local, MPI's own vectorised kernels.
**
** The buffer is cut into one chunk per rank (all_reduce: chunk i starts at total * i / size;
** reduce_scatter and all_gather: blocks of `block` elements). Reduce-scatter takes size - 1
** steps: in step s rank r sends its partial sum of chunk (r - s - 1) to rank r + 1 and receives
** chunk (r - s - 2) from rank r - 1, adding its own part; after the last step it holds the sum of
** chunk r. All-gather takes size - 1 steps: in step s rank r sends chunk (r - s) on and receives
** chunk (r - s - 1) in place. all_reduce is the one then the other.
**
** Results are identical on every rank (each chunk is reduced once, by its owner, and then
** copied) and independent of how the calls are timed. The reductions supported (sum, max, min)
** are commutative, so each chunk's value is that of a fixed order of its ranks' operands.
**
** A ring is a state machine the caller drives: mpi_ring_start posts step 0; each time both
** requests of ring->req have completed, mpi_ring_next finishes that step and posts the next,
** until it says done. The caller owns the polling (and so the deadlines).
*/
#ifndef LAMP_MPI_RING_H
#define LAMP_MPI_RING_H

#include <stddef.h>

#include <mpi.h>

typedef enum mpi_ring_kind { MPI_RING_ALL_REDUCE, MPI_RING_REDUCE_SCATTER, MPI_RING_ALL_GATHER } mpi_ring_kind;

typedef struct mpi_ring {
  mpi_ring_kind kind;
  MPI_Comm comm; /* point-to-point traffic only; a communicator of the ring's own */
  int rank, size, tag;
  MPI_Datatype type;
  MPI_Op op;     /* reductions: MPI_SUM, MPI_MAX or MPI_MIN */
  size_t elem;   /* bytes per element */
  size_t total;  /* elements of the whole buffer, every rank's chunks */
  size_t block;  /* reduce_scatter and all_gather: the elements of one rank's block */
  /* all_reduce: src == dst, the buffer. reduce_scatter: src the whole input, dst the rank's
     block (it may be src's start: the input is read before dst is written). all_gather: dst the
     whole output with the rank's block in place; src unused. */
  const char *src;
  char *dst;
  char *scratch[2]; /* reduce-scatter's received chunks: mpi_ring_scratch_bytes */
  int step, steps;
  MPI_Request req[2]; /* this step's send and receive */
} mpi_ring;

/* Bytes of scratch a ring of `kind` needs (both buffers, contiguous); 0 for all_gather. */
size_t mpi_ring_scratch_bytes(mpi_ring_kind kind, size_t total, int size, size_t elem);

/* Fills ring (scratch: mpi_ring_scratch_bytes of them) and posts step 0. An MPI return code. */
int mpi_ring_start(mpi_ring *ring, mpi_ring_kind kind, MPI_Comm comm, int tag, MPI_Datatype type, MPI_Op op,
                   size_t elem, const void *src, void *dst, size_t total, void *scratch);

/* Once ring->req have both completed: finishes the step and posts the next; *done when the
   collective is complete. An MPI return code. */
int mpi_ring_next(mpi_ring *ring, int *done);

#endif
