/*
** The floor of one data-parallel step's communication on this machine: the best of 50
** MPI_Allreduce calls over the MLP's gradient slab (1,863,690 floats, 7.45 MB), next to one
** read-and-write pass over the same slab for scale. scripts/bench/ddp.sh's efficiency cannot beat
** compute / (compute + this).
**
**   mpicc -O2 scripts/bench/allreduce_floor.c -o /tmp/allreduce_floor
**   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -n 2 /tmp/allreduce_floor
*/
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const size_t n = 1863690;
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  if (a == NULL || b == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  for (size_t i = 0; i < n; i++) a[i] = 1.0f;
  double best = 1e9, best_pass = 1e9;
  for (int it = 0; it < 50; it++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, a, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double t1 = MPI_Wtime();
    for (size_t i = 0; i < n; i++) b[i] = a[i] * 0.5f;
    double t2 = MPI_Wtime();
    if (t1 - t0 < best) best = t1 - t0;
    if (t2 - t1 < best_pass) best_pass = t2 - t1;
  }
  if (rank == 0)
    printf("allreduce of %.2f MB: best %.3f ms; one read+write pass: %.3f ms (checksum %g)\n",
           n * sizeof(float) / 1e6, best * 1e3, best_pass * 1e3, (double)b[0]);
  free(a);
  free(b);
  MPI_Finalize();
  return 0;
}
