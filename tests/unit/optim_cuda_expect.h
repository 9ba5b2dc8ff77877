/*
** What the built-in optimizers (sgd, adam, adamw) answer on cuda, which depends on the build:
** where the toolkit was found (LAMP_TEST_HAVE_CUDA=1) they declare cpu and cuda and have a CUDA
** step; elsewhere they declare the CPU only and the core refuses cuda before calling them.
** Include after <cmocka.h>.
*/
#ifndef LAMP_TEST_OPTIM_CUDA_EXPECT_H
#define LAMP_TEST_OPTIM_CUDA_EXPECT_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "plugin/instance.h"

#if LAMP_TEST_HAVE_CUDA
#define OPTIM_DEVICES (LAMP_BIT(LAMP_CPU) | LAMP_BIT(LAMP_CUDA))
#else
#define OPTIM_DEVICES LAMP_BIT(LAMP_CPU)
#endif

/*
** A step whose device says cuda but whose buffers are host memory. Without the CUDA step the core
** refuses it; with it, on a machine without a driver, the CUDA step stops at its first CUDA call
** with the runtime's reason. Where a driver is present the step would hand host pointers to a
** kernel, so nothing is asked there.
*/
static inline void assert_cuda_step_refused(lamp_optim *o, lamp_optim_step *step, const char *name) {
  char want[256];
  step->device = LAMP_CUDA;
#if LAMP_TEST_HAVE_CUDA
  if (access("/dev/nvidiactl", F_OK) == 0) return;
  snprintf(want, sizeof want,
           "%s: cuda step: CUDA driver version is insufficient for CUDA runtime version (CUDA error 35)",
           name);
  lamp_status st = lamp_optim_apply(o, step);
  assert_string_equal(lamp_last_error(), want);
  assert_int_equal(st, LAMP_ERR_SYSTEM);
#else
  snprintf(want, sizeof want, "%s: does not run on cuda (its devices: cpu)", name);
  lamp_status st = lamp_optim_apply(o, step);
  assert_string_equal(lamp_last_error(), want);
  assert_int_equal(st, LAMP_ERR_UNSUPPORTED);
#endif
}

#endif
