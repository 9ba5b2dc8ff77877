/*
** Inside the optimizer plugins' CUDA steps (C++, nvcc): the device side of a plugin object and
** what every step's launch shares. The C side sees only optim_step.h.
*/
#ifndef LAMP_OPTIM_CUDA_H
#define LAMP_OPTIM_CUDA_H

#include <cuda_runtime.h>

#include "optim_step.h"

/*
** Binds the object to the run's device (first time), uploads the segment table where it changed
** since the last step (on the step's stream, from a host copy the plugin keeps), and sets
** *table to the device table and *grid to the blocks covering the slab (LAMP_OPTIM_CHUNK
** elements each, optim_kernel.h).
*/
lamp_status lamp_optim_cuda_prepare(lamp_optim_cuda *cu, const lamp_host *h, lamp_ctx *ctx,
                                    const lamp_optim_step *st,
                                    const lamp_optim_segment **table, unsigned *grid);

/* After a launch: LAMP_OK, or the launch's error named ("sgd step: <CUDA's message>"). */
lamp_status lamp_optim_cuda_launched(const lamp_host *h, lamp_ctx *ctx, const char *what);

#endif
