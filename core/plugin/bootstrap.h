/*
** The bootstrap the core lends to a communicator's create_with_bootstrap (lamp/comm.h, ABI 1.3):
** how the ranks of a run reach each other before the communicator has a channel of its own.
**
** Which transport, decided once per communicator creation (lamp_bootstrap_open):
**   1. launched under mpirun or scripts/lamp-run (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK
**      set, the mpi plugin's own test): over the mpi communicator plugin (bootstrap_comm.c);
**   2. else a world size in LAMP_WORLD_SIZE (or torchrun's WORLD_SIZE) above 1: the file store in
**      LAMP_STORE_DIR (bootstrap_file.c), this process being LAMP_RANK (or RANK);
**   3. else one rank: every call is trivial.
** local_rank and local_size come from an all-gather of host identities (host_id.c), ranks on
** one host numbered in rank order.
**
** Every failure is recorded with lamp_error ("bootstrap: all_gather 2 timed out after 5 s
** waiting for rank 1 (file store /dir/lamp.0)") and kept on the bootstrap, so the core can name
** it when a plugin returns the status without a message of its own, as comm.h tells it to.
*/
#ifndef LAMP_PLUGIN_BOOTSTRAP_H
#define LAMP_PLUGIN_BOOTSTRAP_H

#include "lamp/comm.h"

/* The seconds a bootstrap's own opening exchange may take: LAMP_COMM_TIMEOUT, else 300. */
double lamp_bootstrap_default_timeout(void);

/* The bootstrap for this process, chosen as above. timeout_s bounds its opening exchange (the
   host identities). Close with lamp_bootstrap_close. */
lamp_status lamp_bootstrap_open(lamp_bootstrap **out, double timeout_s);

/* The file store alone (rank of size, in dir/<tag>), for tests and for lamp_bootstrap_open. */
lamp_status lamp_bootstrap_open_file(lamp_bootstrap **out, const char *dir, const char *tag, int rank,
                                     int size, double timeout_s);

void lamp_bootstrap_close(lamp_bootstrap *b); /* NULL is a no-op */

/* What the transport is, for messages and logs: "mpi", "file store /dir/lamp.0", "single rank". */
const char *lamp_bootstrap_transport(const lamp_bootstrap *b);

/* Whether closing may wait for the other ranks (over mpi: MPI_Finalize does), so a rank that
   closes it after a failure of its own may not return until they end. */
int lamp_bootstrap_close_waits(const lamp_bootstrap *b);

/* The message of the last failed call since lamp_bootstrap_clear_failure ("" when none). */
const char *lamp_bootstrap_failure(const lamp_bootstrap *b);
void lamp_bootstrap_clear_failure(lamp_bootstrap *b);

/* ---- internal to the bootstrap files --------------------------------------------------------- */
/*
** A transport moves bytes among `size` ranks; bootstrap.c checks the arguments, numbers the
** calls and records failures. Each call names itself in its messages with `seq`, the number of
** the collective in this bootstrap (0 is the opening exchange of host identities).
*/
typedef struct lamp_boot_transport {
  char name[4200]; /* lamp_bootstrap_transport's answer */
  int rank, size;
  int close_waits; /* lamp_bootstrap_close_waits */
  void *state;
  lamp_status (*broadcast)(void *state, unsigned long seq, void *buf, size_t bytes, int root, double timeout_s);
  lamp_status (*all_gather)(void *state, unsigned long seq, const void *send, void *recv, size_t bytes,
                            double timeout_s);
  lamp_status (*barrier)(void *state, unsigned long seq, double timeout_s);
  void (*close)(void *state);
} lamp_boot_transport;

/* Over an open communicator (bootstrap_comm.c), which the transport then owns and closes. */
typedef struct lamp_comm lamp_comm;
lamp_status lamp_boot_comm_open(lamp_boot_transport *t, lamp_comm *comm);

/* The file store (bootstrap_file.c): rank 0 creates dir/<tag>, the others wait for it until
   timeout_s. */
lamp_status lamp_boot_file_open(lamp_boot_transport *t, const char *dir, const char *tag, int rank, int size,
                                double timeout_s);

/* host_id.c. This host's identity: its name and boot id, NUL-padded to LAMP_HOST_ID_BYTES. */
#define LAMP_HOST_ID_BYTES 128
void lamp_host_identity(char id[LAMP_HOST_ID_BYTES]);

/* Given every rank's identity (ids[r * LAMP_HOST_ID_BYTES]), rank's place among the ranks of its
   host, in rank order, and how many there are. */
void lamp_host_local_rank(const char *ids, int size, int rank, int *local_rank, int *local_size);

#endif
