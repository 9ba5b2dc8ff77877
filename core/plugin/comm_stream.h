/*
** The stream-ordered collectives of comm ABI 1.3 (all_reduce_enqueue, wait_stream, poll) as the
** core calls them, with instance.h's conventions: a failure is lamp_error("<plugin>: <message>"),
** an operation the plugin lacks is LAMP_ERR_UNSUPPORTED.
**
** Interim file (issue #16, helper H): these wrappers belong with the others in instance.c, where
** helper F writes them under the same names; this file goes away when that work is merged, and
** lamp_comm_supports_enqueue(c) becomes lamp_comm_supports(c, "all_reduce_enqueue").
*/
#ifndef LAMP_PLUGIN_COMM_STREAM_H
#define LAMP_PLUGIN_COMM_STREAM_H

#include "plugin/instance.h"

/* Whether the communicator has all three stream-ordered operations. */
int lamp_comm_supports_enqueue(const lamp_comm *c);

/*
** Queues an in-place all-reduce of buf (memory of `device`) on `stream`, the device's queue, after
** the work already there, and returns at once. On a device whose memory the plugin reaches through
** the host view (the simulated one, for a plugin declaring the CPU) the plugin gets the host view
** and LAMP_CPU, without a synchronisation: the stream orders its accesses.
*/
lamp_status lamp_comm_all_reduce_enqueue(lamp_comm *c, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op,
                                         lamp_device device, void *stream, lamp_request **req);

/* Makes `stream` wait for req without blocking the host; releases req (also on failure). */
lamp_status lamp_comm_wait_stream(lamp_comm *c, lamp_request *req, void *stream);

/* Never blocks: LAMP_OK while every collective so far has finished or is within its time. */
lamp_status lamp_comm_poll(lamp_comm *c);

#endif
