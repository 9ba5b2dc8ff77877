/*
** libnccl, opened at first need. The plugin never links it: a machine without NCCL (or without a
** GPU) still loads nccl.so, and its probe says what is missing. The few functions the plugin
** calls are resolved into one table.
*/
#ifndef LAMP_NCCL_LIB_H
#define LAMP_NCCL_LIB_H

#include <stddef.h>

#include <nccl.h>

/* Versions before 2.14 have no non-blocking communicators, which the deadlines rely on. */
#define NCCL_LIB_MIN_VERSION NCCL_VERSION(2, 14, 0)

typedef struct nccl_lib {
  char path[512]; /* what was opened: $LAMP_NCCL_LIBRARY or "libnccl.so.2" */
  int version;    /* NCCL_VERSION_CODE of the library loaded */
  ncclResult_t (*get_version)(int *version);
  ncclResult_t (*get_unique_id)(ncclUniqueId *id);
  ncclResult_t (*comm_init_rank_config)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                        ncclConfig_t *config);
  ncclResult_t (*comm_get_async_error)(ncclComm_t comm, ncclResult_t *state);
  ncclResult_t (*comm_finalize)(ncclComm_t comm);
  ncclResult_t (*comm_destroy)(ncclComm_t comm);
  ncclResult_t (*comm_abort)(ncclComm_t comm);
  const char *(*get_error_string)(ncclResult_t result);
  const char *(*get_last_error)(ncclComm_t comm);
  ncclResult_t (*all_reduce)(const void *send, void *recv, size_t count, ncclDataType_t type,
                             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*broadcast)(const void *send, void *recv, size_t count, ncclDataType_t type,
                            int root, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*all_gather)(const void *send, void *recv, size_t count, ncclDataType_t type,
                             ncclComm_t comm, cudaStream_t stream);
  ncclResult_t (*reduce_scatter)(const void *send, void *recv, size_t recv_count, ncclDataType_t type,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
} nccl_lib;

/*
** The library, opened once per process and kept; NULL with the reason in why[why_size] when it
** cannot be opened, lacks a function, or is older than 2.14. A failure is not remembered: a
** later call tries again.
*/
const nccl_lib *nccl_lib_open(char *why, size_t why_size);

/* "2.28.9" for a version code. */
void nccl_version_text(int code, char *buf, size_t size);

#endif
