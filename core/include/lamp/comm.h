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

  /* Optional: recvbuf holds size() * count elements, rank r's at r * count. */
  lamp_status (*all_gather)(void *comm, const void *sendbuf, void *recvbuf, size_t count,
                            lamp_dtype dtype, lamp_device device);
  /* Optional: sendbuf holds size() * count elements; rank r receives the reduced block r. */
  lamp_status (*reduce_scatter)(void *comm, const void *sendbuf, void *recvbuf, size_t count,
                                lamp_dtype dtype, lamp_reduce_op op, lamp_device device);
} lamp_comm_v1;

#ifdef __cplusplus
}
#endif
#endif
