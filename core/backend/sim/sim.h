/*
** The simulated device (LAMP_SIM): a test-only backend that makes device bugs visible on a machine
** without a GPU. It runs the CPU backend's operations, so its numbers are the CPU's bit for bit,
** but it behaves like a GPU in the two ways that host code most often gets wrong:
**
**   - Its memory cannot be read by the host. The arena is one memfd mapped twice: the pointers
**     handed out (the device view) are mapped PROT_NONE, so any host read or write through them
**     is a SIGSEGV; only the device's own queued work touches the data, through a second,
**     readable mapping of the same pages (the host view).
**   - Its work runs later. Every operation is queued, as a closure holding a copy of its
**     arguments, and run in order on one worker thread after a small pseudo-random delay
**     (LAMP_SIM_SEED sets the generator's seed). Results reach the host only through a download,
**     lamp_synchronize or an event; an operation's failure is reported, as CUDA's are, by the
**     next call that waits for the queue.
**
** Its stream (sim_stream.h, what lamp_device_stream returns) queues a plugin's host functions in
** order with its work: a test communicator orders its collectives there as NCCL does on a CUDA
** stream.
**
** It is not part of the lamp executable: a test program registers it with
**   lamp_backend_register(LAMP_SIM, &lamp_sim_backend);
** or, to run the 16-bit GEMM operand path a CUDA device takes, with lamp_sim_native16_backend.
** A forked child must not use it: the worker thread is not copied into the child.
*/
#ifndef LAMP_BACKEND_SIM_H
#define LAMP_BACKEND_SIM_H

#include "backend/backend_impl.h"

extern const lamp_backend lamp_sim_backend;

/* The same device advertising LAMP_CAP_NATIVE_16BIT_GEMM: its GEMMs and convolutions take 16-bit
   operands and widen them exactly inside the operation (backend.c). */
extern const lamp_backend lamp_sim_native16_backend;

/* For tests that need work provably still queued: while held, the worker starts no new operation
   (the one running finishes). Release before anything waits for the queue, or it waits forever. */
void lamp_sim_hold(int on);

/*
** How often the host has blocked on the queue so far: lamp_synchronize, a blocking upload,
** download or copy to the host, an event wait, or the sim draining its queue (a full arena, a
** workspace release), each counted only when it waits for work the host has not waited for
** already. A wait for work covered by an earlier one is free on a GPU too (cudaEventSynchronize on
** a completed event returns at once). The measure of "one synchronisation per optimizer step".
*/
uint64_t lamp_sim_host_waits(void);

#endif
