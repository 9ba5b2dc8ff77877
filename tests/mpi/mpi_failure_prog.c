/*
** The program behind test_mpi_failure.sh (not a test by itself): two ranks open the mpi
** communicator with timeout 5 s and all-reduce once; then rank 1 kills itself (SIGKILL, no
** goodbye) and rank 0 all-reduces again. Rank 0 must get LAMP_ERR_REMOTE naming rank 1; it
** prints the error, checks that a later call fails at once, closes the communicator and
** exits 1 the way an application does. Exit 0 means the failure went unnoticed (a bug);
** exit 2 means a wrong status or message.
*/
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "plugin/instance.h"

int main(void) {
  lamp_comm *c = NULL;
  lamp_option timeout = {"timeout", 5.0};
  if (lamp_comm_open(&c, "mpi", &timeout, 1) != LAMP_OK) {
    fprintf(stderr, "open failed: %s\n", lamp_last_error());
    return 2;
  }
  int rank = lamp_comm_rank(c);
  float x[4] = {1, 2, 3, 4};
  if (lamp_comm_all_reduce(c, x, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU) != LAMP_OK || x[3] != 8.0f) {
    fprintf(stderr, "rank %d: first all_reduce failed: %s\n", rank, lamp_last_error());
    return 2;
  }
  fprintf(stderr, "rank %d: first all_reduce ok\n", rank);
  if (rank == 1) raise(SIGKILL);

  lamp_status st = lamp_comm_all_reduce(c, x, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CPU);
  if (st == LAMP_OK) {
    fprintf(stderr, "rank %d: second all_reduce succeeded without rank 1\n", rank);
    return 0;
  }
  fprintf(stderr, "rank %d: error: %s\n", rank, lamp_last_error());
  int good = st == LAMP_ERR_REMOTE && strstr(lamp_last_error(), "rank 1 ") != NULL &&
             strstr(lamp_last_error(), "all_reduce") != NULL;
  st = lamp_comm_barrier(c);
  fprintf(stderr, "rank %d: then barrier: %s\n", rank, st == LAMP_OK ? "ok" : lamp_last_error());
  good = good && st == LAMP_ERR_REMOTE && strstr(lamp_last_error(), "failed earlier") != NULL;
  lamp_comm_close(c);
  return good ? 1 : 2;
}
