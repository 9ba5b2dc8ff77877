/*
** Communicator plugins (family LAMP_KIND_COMM): collective operations between the ranks of a
** data-parallel run. Buffers live on the device given at the call; the communicator never
** allocates user-visible memory.
*/
#ifndef LAMP_COMM_H
#define LAMP_COMM_H

#include "lamp/host.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A non-blocking operation in flight; owned by the plugin until wait() returns. */
typedef struct lamp_request lamp_request;

/*
** ABI 1.3. How the ranks of a run reach each other before a communicator has a channel of its
** own (NCCL's unique id travels over it). The core builds it (over MPI under mpirun or
** lamp-run, over a shared folder for launchers without MPI, or trivially for one rank) and
** lends it to create_with_bootstrap; it stays valid until destroy returns.
**
** Every call is collective: all ranks make the same calls in the same order. A call gives up
** after timeout_s seconds, or soon after the run is aborted (host->abort_flag), with
** LAMP_ERR_REMOTE naming the rank(s) that did not arrive; the core has then recorded the
** message, so the plugin returns the status as it is (without set_error).
*/
typedef struct lamp_bootstrap {
  uint32_t struct_size;       /* sizeof(lamp_bootstrap) of the core */
  int rank, size;             /* this process in the run */
  int local_rank, local_size; /* among the ranks on this host (by an all-gather of host identities) */
  void *impl;                 /* the core's */
  /* root's `bytes` of buf reach every rank's buf. */
  lamp_status (*broadcast)(const struct lamp_bootstrap *b, void *buf, size_t bytes, int root, double timeout_s);
  /* recv (size * bytes) receives rank r's `bytes` of send at r * bytes. */
  lamp_status (*all_gather)(const struct lamp_bootstrap *b, const void *send, void *recv, size_t bytes,
                            double timeout_s);
  lamp_status (*barrier)(const struct lamp_bootstrap *b, double timeout_s);
} lamp_bootstrap;

typedef struct lamp_comm_v1 {
  lamp_plugin hdr;

  /* Required. Joins the process group; params as declared in hdr.params (e.g. "timeout"). */
  lamp_status (*create)(const lamp_host *host, lamp_ctx *ctx, const double *params, void **comm);
  void (*destroy)(void *comm); /* required; NULL is a no-op */

  int (*rank)(void *comm); /* required */
  int (*size)(void *comm); /* required */

  /* Required: in-place all-reduce of `count` elements, blocking. */
  lamp_status (*all_reduce)(void *comm, void *buf, size_t count, lamp_dtype dtype,
                            lamp_reduce_op op, lamp_device device);

  /* Required: every rank receives root's `count` elements in buf. */
  lamp_status (*broadcast)(void *comm, void *buf, size_t count, lamp_dtype dtype, int root,
                           lamp_device device);

  lamp_status (*barrier)(void *comm); /* required */

  /*
  ** Optional: non-blocking all-reduce, so gradient buckets overlap the backward pass.
  ** wait() returns LAMP_ERR_REMOTE (with a message) when the timeout passes.
  */
  lamp_status (*all_reduce_start)(void *comm, void *buf, size_t count, lamp_dtype dtype,
                                  lamp_reduce_op op, lamp_device device, lamp_request **req);
  lamp_status (*wait)(void *comm, lamp_request *req);

  /* Optional: recvbuf holds size() * count elements, rank r's at r * count. sendbuf may be
     recvbuf + rank * count (in place, as MPI_IN_PLACE and NCCL allow): the core gathers ZeRO-1's
     fp32 pieces so. */
  lamp_status (*all_gather)(void *comm, const void *sendbuf, void *recvbuf, size_t count,
                            lamp_dtype dtype, lamp_device device);
  /* Optional: sendbuf holds size() * count elements; rank r receives the reduced block r. */
  lamp_status (*reduce_scatter)(void *comm, const void *sendbuf, void *recvbuf, size_t count,
                                lamp_dtype dtype, lamp_reduce_op op, lamp_device device);

  /* ---- ABI 1.3: present when hdr.struct_size reaches them (LAMP_COMM_HAS) ---------------- */

  /* Optional: create with the run's bootstrap. Where present the core calls it instead of
     create; `boot` is the core's and stays valid until destroy returns. */
  lamp_status (*create_with_bootstrap)(const lamp_host *host, lamp_ctx *ctx, const double *params,
                                       const lamp_bootstrap *boot, void **comm);

  /*
  ** Optional, for a device whose work is queued (cuda), all three or none. all_reduce_enqueue
  ** orders an in-place all-reduce after the work already queued on `stream` (the core's, from
  ** host->stream) and returns at once, without waiting for either. wait_stream makes `stream`
  ** wait for it, again without blocking the host, and releases req. poll never blocks: LAMP_OK
  ** while every collective so far has finished or is within its time, else LAMP_ERR_REMOTE
  ** naming the operation, its sequence number, the rank and the timeout; the communicator is
  ** then broken and every later call fails the same way.
  */
  lamp_status (*all_reduce_enqueue)(void *comm, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op,
                                    lamp_device device, void *stream, lamp_request **req);
  lamp_status (*wait_stream)(void *comm, lamp_request *req, void *stream);
  lamp_status (*poll)(void *comm);

  /* ---- ABI 1.4 ---------------------------------------------------------------------------- */

  /* Text options (abi.h, lamp_text_param), read in create with host->option_text. */
  const lamp_text_param *text_params;
  uint32_t n_text_params;
} lamp_comm_v1;

/* Whether a communicator's table reaches `member` (one built against an older minor is shorter). */
#define LAMP_COMM_HAS(table, member)                                                               \
  (offsetof(lamp_comm_v1, member) + sizeof((table)->member) <= (table)->hdr.struct_size)

#ifdef __cplusplus
}
#endif
#endif
