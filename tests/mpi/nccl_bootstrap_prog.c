/*
** The nccl communicator's creation across two real ranks on a machine without a GPU driver:
** `mpirun -n 2 nccl_bootstrap_prog`. Each rank hands the plugin a bootstrap over MPI
** (mpi_bootstrap.h, standing in for the core's) and calls create_with_bootstrap directly. Checked
** on both ranks:
**   - rank 0's NCCL unique id travels over the bootstrap: one broadcast from root 0, and every
**     rank holds the same bytes afterwards (ready, a version of 2.14 or later, a non-zero id);
**   - then each rank fails cleanly with CUDA's message, after the all-gather of statuses that
**     keeps ranks from waiting on each other;
**   - well within the timeout (LAMP_COMM_TIMEOUT, 20 s here): no rank waits for another.
** Prints "nccl_bootstrap: 2 ranks: N passed, M failed" on rank 0; the exit status is equal on all.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "mpi_bootstrap.h"
#include "plugin/loader.h"

#define PACKET_BYTES (4 + 4 + 128)
#define NO_DRIVER \
  "cannot use the GPU: CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver)"

static int rank_, passed, failed;

static void check(int ok, const char *what, const char *detail) {
  if (ok) {
    passed++;
    return;
  }
  failed++;
  fprintf(stderr, "rank %d: FAILED: %s%s%s\n", rank_, what, detail ? ": " : "", detail ? detail : "");
}

int main(void) {
  MPI_Init(NULL, NULL);
  mpi_boot mb;
  lamp_bootstrap boot = mpi_boot_make(&mb);
  rank_ = boot.rank;
  const char *env = getenv("LAMP_COMM_TIMEOUT");
  double timeout = env != NULL ? atof(env) : 20.0;

  const lamp_plugin_handle *h = NULL;
  if (lamp_plugin_load(LAMP_KIND_COMM, "nccl", &h) != LAMP_OK) {
    fprintf(stderr, "rank %d: %s\n", rank_, lamp_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const lamp_comm_v1 *t = (const lamp_comm_v1 *)h->desc;
  check(LAMP_COMM_HAS(t, create_with_bootstrap) && t->create_with_bootstrap != NULL, "create_with_bootstrap", NULL);

  lamp_ctx *ctx = lamp_ctx_new();
  void *comm = NULL;
  double params[1] = {timeout};
  double start = mpi_boot_now();
  lamp_status st = t->create_with_bootstrap(lamp_host_get(), ctx, params, &boot, &comm);
  double took = mpi_boot_now() - start;

  char detail[600];
  snprintf(detail, sizeof detail, "status %d, '%s'", (int)st, lamp_ctx_message(ctx));
  check(st == LAMP_ERR_UNSUPPORTED && strcmp(lamp_ctx_message(ctx), NO_DRIVER) == 0, "CUDA's message", detail);
  check(comm == NULL, "no communicator", NULL);
  snprintf(detail, sizeof detail, "%.1f s, timeout %g s", took, timeout);
  check(took < timeout / 2, "failed well within the timeout", detail);

  snprintf(detail, sizeof detail, "%d broadcasts (root %d, %zu bytes), %d all-gathers", mb.broadcasts, mb.last_root,
           mb.last_broadcast_bytes, mb.all_gathers);
  check(mb.broadcasts == 1 && mb.last_root == 0 && mb.last_broadcast_bytes == PACKET_BYTES && mb.all_gathers == 1,
        "the bootstrap calls", detail);
  int32_t ready, version;
  memcpy(&ready, mb.broadcast_seen, 4);
  memcpy(&version, mb.broadcast_seen + 4, 4);
  int id_bytes = 0;
  for (int i = 8; i < PACKET_BYTES; i++) id_bytes += mb.broadcast_seen[i] != 0;
  snprintf(detail, sizeof detail, "ready %d, version %d, %d non-zero id bytes", (int)ready, (int)version, id_bytes);
  check(ready == 1 && version >= 21400 && id_bytes > 0, "rank 0's id packet", detail);
  unsigned char *all = malloc((size_t)boot.size * PACKET_BYTES);
  MPI_Allgather(mb.broadcast_seen, PACKET_BYTES, MPI_BYTE, all, PACKET_BYTES, MPI_BYTE, MPI_COMM_WORLD);
  int same = 1;
  for (int r = 1; r < boot.size; r++) same &= memcmp(all, all + (size_t)r * PACKET_BYTES, PACKET_BYTES) == 0;
  check(same, "every rank holds rank 0's id", NULL);
  free(all);

  int counts[2] = {passed, failed}, totals[2];
  MPI_Allreduce(counts, totals, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank_ == 0) printf("nccl_bootstrap: %d ranks: %d passed, %d failed\n", boot.size, totals[0], totals[1]);
  lamp_ctx_free(ctx);
  MPI_Comm_free(&mb.comm);
  MPI_Finalize();
  return totals[1] == 0 && totals[0] > 0 ? 0 : 1;
}
