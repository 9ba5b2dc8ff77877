/*
** Creating the communicator: every rank makes the same two bootstrap calls whatever fails
** locally, so a failure on one rank reaches the others at once instead of at their deadlines.
**
**   1. libnccl is opened; rank 0 makes the NCCL unique id (its bootstrap root starts listening).
**   2. broadcast from rank 0: the id, rank 0's NCCL version, whether rank 0 got that far.
**   3. each rank takes its GPU: the bootstrap's local rank (NCCL refuses two ranks on one GPU),
**      which must be the device the process trains on; a stream, events, staging memory.
**   4. all-gather of one status per rank: a rank that failed in 1-3 stops every rank here.
**   5. ncclCommInitRankConfig with blocking = 0, polled until ready against the timeout and the
**      run's abort flag; on the deadline ncclCommAbort, and an error that says so.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_impl.h"

/* What rank 0 broadcasts in step 2. */
typedef struct id_packet {
  int32_t ready;   /* 1: rank 0 has its id (else it failed before; its own message says why) */
  int32_t version; /* rank 0's NCCL version code */
  ncclUniqueId id;
} id_packet;

lamp_status nccl_cuda_error(nccl_comm *m, lamp_status code, cudaError_t err, const char *what) {
  return m->host->set_error(m->ctx, code, "%s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

/* ---- step 3: the GPU ------------------------------------------------------------------------- */

static lamp_status choose_gpu(nccl_comm *m, const lamp_bootstrap *boot) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return nccl_cuda_error(m, LAMP_ERR_UNSUPPORTED, err, "cannot use the GPU");
  int local_rank = boot != NULL ? boot->local_rank : 0;
  int local_size = boot != NULL ? boot->local_size : 1;
  if (local_size > count)
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_USAGE,
                              "%d ranks on this host but %d GPU%s: NCCL needs one GPU per rank", local_size,
                              count, count == 1 ? "" : "s");
  /* The device the core trains on, where it says: the buffers live there. */
  int trains_on = -1;
  if (LAMP_HOST_HAS(m->host, run_device) && LAMP_HOST_HAS(m->host, device_ordinal) &&
      m->host->run_device() == LAMP_CUDA)
    trains_on = m->host->device_ordinal(LAMP_CUDA);
  if (boot == NULL) {
    m->gpu = trains_on >= 0 ? trains_on : 0;
    return LAMP_OK;
  }
  m->gpu = local_rank;
  if (trains_on >= 0 && trains_on != m->gpu)
    return m->host->set_error(m->ctx, LAMP_ERR_INVALID_USAGE,
                              "local rank %d of %d on this host takes cuda:%d, but this process trains on "
                              "cuda:%d: each rank must train on the GPU of its local rank",
                              local_rank, local_size, m->gpu, trains_on);
  return LAMP_OK;
}

static lamp_status open_device(nccl_comm *m) {
  char what[96];
  cudaError_t err = cudaSetDevice(m->gpu);
  const char *step = "making it current";
  if (err == cudaSuccess) {
    step = "creating the communication stream";
    err = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
  }
  if (err == cudaSuccess) {
    step = "creating an event";
    err = cudaEventCreateWithFlags(&m->ready, cudaEventDisableTiming);
  }
  if (err == cudaSuccess) {
    step = "allocating the staging buffer";
    err = cudaMalloc(&m->stage_dev, NCCL_STAGE_BYTES);
  }
  if (err == cudaSuccess) {
    step = "allocating the pinned staging buffer";
    err = cudaMallocHost(&m->stage_host, NCCL_STAGE_BYTES);
  }
  if (err == cudaSuccess) return LAMP_OK;
  snprintf(what, sizeof what, "cannot use the GPU cuda:%d (%s)", m->gpu, step);
  return nccl_cuda_error(m, LAMP_ERR_SYSTEM, err, what);
}

/* ---- step 5: NCCL's init --------------------------------------------------------------------- */

static lamp_status init_failed(nccl_comm *m, lamp_status code, const char *why) {
  if (m->comm != NULL) {
    m->lib->comm_abort(m->comm);
    m->comm = NULL;
  }
  return m->host->set_error(m->ctx, code, "initialising NCCL on rank %d of %d (cuda:%d) %s", m->rank, m->size,
                            m->gpu, why);
}

static lamp_status init_error(nccl_comm *m, ncclResult_t r) {
  char why[512];
  const char *detail = m->lib->get_last_error(m->comm);
  snprintf(why, sizeof why, "failed: %s%s%s%s", m->lib->get_error_string(r), detail != NULL && detail[0] ? " (" : "",
           detail != NULL ? detail : "", detail != NULL && detail[0] ? ")" : "");
  return init_failed(m, r == ncclRemoteError ? LAMP_ERR_REMOTE : LAMP_ERR_SYSTEM, why);
}

static lamp_status init_nccl(nccl_comm *m, ncclUniqueId id) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0; /* every call returns at once; the deadlines below are ours */
  double start = nccl_now(), deadline = start + m->timeout;
  ncclResult_t r = m->lib->comm_init_rank_config(&m->comm, m->size, id, m->rank, &config);
  if ((r != ncclSuccess && r != ncclInProgress) || m->comm == NULL) return init_error(m, r);
  for (long nap = 20000L;; nap = nap < 1000000L ? nap * 2 : nap) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t q = m->lib->comm_get_async_error(m->comm, &state);
    if (q != ncclSuccess) state = q;
    if (state == ncclSuccess) return LAMP_OK;
    if (state != ncclInProgress) return init_error(m, state);
    char why[256];
    if (nccl_now() > deadline) {
      snprintf(why, sizeof why,
               "did not finish within %g s (%s): a rank did not join (exited, hung, or never created its "
               "communicator); the communicator was aborted",
               m->timeout, nccl_timeout_source(m));
      return init_failed(m, LAMP_ERR_REMOTE, why);
    }
    if (m->host->abort_flag != NULL && *m->host->abort_flag) {
      snprintf(why, sizeof why, "was interrupted after %.1f s: the run is stopping; the communicator was aborted",
               nccl_now() - start);
      return init_failed(m, LAMP_ERR_REMOTE, why);
    }
    nccl_nap(nap);
  }
}

/* "1, 3" of the ranks whose status is not 0; how many. */
static int failed_ranks(const int32_t *status, int size, char *buf, size_t bufsize) {
  int n = 0;
  buf[0] = '\0';
  for (int r = 0; r < size; r++) {
    if (status[r] == 0) continue;
    size_t used = strlen(buf);
    if (used + 16 < bufsize) snprintf(buf + used, bufsize - used, "%s%d", n ? ", " : "", r);
    n++;
  }
  return n;
}

lamp_status nccl_setup(nccl_comm *m, const lamp_bootstrap *boot) {
  char why[512];
  lamp_status local = LAMP_OK;

  /* 1 */
  m->lib = nccl_lib_open(why, sizeof why);
  if (m->lib == NULL) local = m->host->set_error(m->ctx, LAMP_ERR_UNSUPPORTED, "%s", why);
  id_packet packet;
  memset(&packet, 0, sizeof packet);
  if (m->rank == 0 && local == LAMP_OK) {
    ncclResult_t r = m->lib->get_unique_id(&packet.id);
    if (r != ncclSuccess) {
      const char *detail = m->lib->get_last_error(NULL);
      local = m->host->set_error(m->ctx, LAMP_ERR_SYSTEM, "creating the NCCL unique id failed: %s%s%s",
                                 m->lib->get_error_string(r), detail != NULL && detail[0] ? ": " : "",
                                 detail != NULL ? detail : "");
    } else {
      packet.ready = 1;
      packet.version = m->lib->version;
    }
  }

  /* 2 */
  if (boot != NULL && m->size > 1) {
    lamp_status st = boot->broadcast(boot, &packet, sizeof packet, 0, m->timeout);
    if (st != LAMP_OK) return local != LAMP_OK ? local : st; /* the core has its message */
  }
  if (local == LAMP_OK && !packet.ready)
    local = m->host->set_error(m->ctx, LAMP_ERR_REMOTE,
                               "rank 0 could not create the NCCL unique id (its own message says why)");
  if (local == LAMP_OK && packet.version != m->lib->version) {
    char ours[32], theirs[32];
    nccl_version_text(m->lib->version, ours, sizeof ours);
    nccl_version_text(packet.version, theirs, sizeof theirs);
    local = m->host->set_error(m->ctx, LAMP_ERR_INVALID_USAGE,
                               "rank 0 has NCCL %s, this rank %s (%s): every rank needs the same NCCL", theirs,
                               ours, m->lib->path);
  }

  /* 3 */
  if (local == LAMP_OK) local = choose_gpu(m, boot);
  if (local == LAMP_OK) local = open_device(m);

  /* 4 */
  if (boot != NULL && m->size > 1) {
    int32_t mine = local != LAMP_OK;
    int32_t *all = calloc((size_t)m->size, sizeof *all);
    if (all == NULL) return m->host->set_error(m->ctx, LAMP_ERR_SYSTEM, "out of memory");
    lamp_status st = boot->all_gather(boot, &mine, all, sizeof mine, m->timeout);
    char ranks[256];
    int n = st == LAMP_OK ? failed_ranks(all, m->size, ranks, sizeof ranks) : 0;
    free(all);
    if (st != LAMP_OK) return local != LAMP_OK ? local : st;
    if (local == LAMP_OK && n > 0)
      local = m->host->set_error(m->ctx, LAMP_ERR_REMOTE,
                                 "rank%s %s could not set up NCCL (see %s message%s); no rank initialises it",
                                 n > 1 ? "s" : "", ranks, n > 1 ? "their" : "its", n > 1 ? "s" : "");
  }
  if (local != LAMP_OK) return local;

  /* 5 */
  return init_nccl(m, packet.id);
}
