/*
** What a launcher (mpirun, lamp-run, torchrun, Slurm) says about this process through its
** environment, read in one place: whether mpirun started it, its rank, and its rank among the
** processes on this host. Each is a guess until a communicator or bootstrap knows better.
*/
#ifndef LAMP_BASE_LAUNCHER_H
#define LAMP_BASE_LAUNCHER_H

/* The variable by which mpirun (or lamp-run) says it started this process (OMPI_COMM_WORLD_SIZE,
   PMI_SIZE or PMIX_RANK, as the mpi plugin's probe reads them), or NULL. */
const char *lamp_launcher_mpi_var(void);

/* This process's rank (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, RANK), or -1 when none says. */
int lamp_launcher_rank(void);

/* Its rank among the processes on this host (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
   LOCAL_RANK, SLURM_LOCALID), or -1 when none says. */
int lamp_launcher_local_rank(void);

#endif
