/*
** Which devices a plugin runs on, and the host view (core/plugin/instance.c, "Devices"): the
** core enforces hdr.devices, refuses a plugin on a device it does not declare with one message,
** and hands a CPU plugin the simulated device's memory as host memory. Also the host table's
** ABI 1.1 device services (core/plugin/host.c).
**
** The simulated device (LAMP_SIM) maps its memory PROT_NONE for the host: a plugin handed a
** device pointer instead of its host view crashes the test, so every call below that reaches a
** plugin on LAMP_SIM proves the translation.
** Fixtures: tests/bad_plugins/dev*.c (device_optim.h) and abi10.c.
*/
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "optim_cuda_expect.h"
#include "base/error.h"
#include "plugin/instance.h"
#include "plugin/loader.h"
#include "tensor/memory.h"

#define BAD(name) LAMP_BAD_PLUGIN_DIR "/" name ".so"
#define OK(call) assert_int_equal((call), LAMP_OK)
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers --------------------------------------------------------------------------------- */

static void assert_error(lamp_status st, lamp_status code, const char *fmt, ...) {
  char expected[LAMP_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(expected, sizeof expected, fmt, ap);
  va_end(ap);
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(st, code);
}

static const lamp_plugin_handle *load(lamp_kind kind, const char *path) {
  const lamp_plugin_handle *h = NULL;
  lamp_status st = lamp_plugin_load(kind, path, &h);
  if (st != LAMP_OK) fail_msg("%s", lamp_last_error());
  return h;
}

/* n floats on the simulated device holding x. */
static float *sim_floats(const float *x, size_t n) {
  float *d = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_WORKSPACE, n * sizeof *d);
  assert_non_null(d);
  OK(lamp_copy(LAMP_SIM, d, LAMP_HOST, x, n * sizeof *x));
  return d;
}

static void download(float *out, const float *d, size_t n) {
  OK(lamp_copy(LAMP_HOST, out, LAMP_SIM, d, n * sizeof *out));
}

static int setup(void **state) {
  (void)state;
  return lamp_backend_register(LAMP_SIM, &lamp_sim_backend) == LAMP_OK ? 0 : -1;
}

/* ---- declared devices ------------------------------------------------------------------------ */

static void test_declared_devices(void **state) {
  (void)state;
  const lamp_plugin_handle *cpu = load(LAMP_KIND_OPTIM, BAD("devcpu"));
  const lamp_plugin_handle *cuda = load(LAMP_KIND_OPTIM, BAD("devcuda"));
  const lamp_plugin_handle *both = load(LAMP_KIND_OPTIM, BAD("devboth"));

  assert_true(lamp_plugin_runs_on(cpu, LAMP_CPU));
  assert_false(lamp_plugin_runs_on(cpu, LAMP_CUDA));
  OK(lamp_plugin_check_device(cpu, LAMP_CPU));
  assert_error(lamp_plugin_check_device(cpu, LAMP_CUDA), LAMP_ERR_UNSUPPORTED,
               "devcpu: does not run on cuda (its devices: cpu)");

  /* Declared is enough, whether or not this build has the device. */
  assert_true(lamp_plugin_runs_on(cuda, LAMP_CUDA));
  assert_false(lamp_plugin_runs_on(cuda, LAMP_CPU));
  OK(lamp_plugin_check_device(cuda, LAMP_CUDA));
  assert_error(lamp_plugin_check_device(cuda, LAMP_CPU), LAMP_ERR_UNSUPPORTED,
               "devcuda: does not run on cpu (its devices: cuda)");

  assert_true(lamp_plugin_runs_on(both, LAMP_CPU));
  assert_true(lamp_plugin_runs_on(both, LAMP_CUDA));
  OK(lamp_plugin_check_device(both, LAMP_CPU));
  OK(lamp_plugin_check_device(both, LAMP_CUDA));

  /* A device outside every table. */
  assert_false(lamp_plugin_runs_on(both, (lamp_device)40));
  assert_error(lamp_plugin_check_device(both, (lamp_device)40), LAMP_ERR_UNSUPPORTED,
               "devboth: does not run on unknown device (its devices: cpu, cuda)");
  assert_false(lamp_plugin_runs_on(NULL, LAMP_CPU));
  assert_error(lamp_plugin_check_device(NULL, LAMP_CPU), LAMP_ERR_INVALID_ARG,
               "plugin device check: NULL plugin");
}

/* devices 0: the CPU for a plugin built against 1.0, which did not enforce the field;
   nothing for one built against 1.1. */
static void test_no_devices_declared(void **state) {
  (void)state;
  const lamp_plugin_handle *v10 = load(LAMP_KIND_COMM, BAD("abi10"));
  const lamp_plugin_handle *v11 = load(LAMP_KIND_OPTIM, BAD("devnone"));
  assert_int_equal(v10->desc->devices, 0);
  assert_int_equal(v11->desc->devices, 0);
  assert_int_equal(v11->desc->abi_minor, LAMP_ABI_MINOR); /* 1.1 or later */

  assert_true(lamp_plugin_runs_on(v10, LAMP_CPU));
  assert_error(lamp_plugin_check_device(v10, LAMP_CUDA), LAMP_ERR_UNSUPPORTED,
               "abi10: does not run on cuda (its devices: cpu)");

  assert_false(lamp_plugin_runs_on(v11, LAMP_CPU));
  assert_false(lamp_plugin_runs_on(v11, LAMP_SIM));
  assert_error(lamp_plugin_check_device(v11, LAMP_CPU), LAMP_ERR_UNSUPPORTED,
               "devnone: does not run on cpu (its devices: none)");
}

/* The built-ins declare what they run on. */
static void test_built_ins(void **state) {
  (void)state;
  const lamp_plugin_handle *sgd = load(LAMP_KIND_OPTIM, "sgd");
  const lamp_plugin_handle *single = load(LAMP_KIND_COMM, "single");
  OK(lamp_plugin_check_device(sgd, LAMP_CPU));
  assert_int_equal(sgd->desc->devices, OPTIM_DEVICES);
#if LAMP_TEST_HAVE_CUDA /* built with its CUDA step */
  OK(lamp_plugin_check_device(sgd, LAMP_CUDA));
#else
  assert_error(lamp_plugin_check_device(sgd, LAMP_CUDA), LAMP_ERR_UNSUPPORTED,
               "sgd: does not run on cuda (its devices: cpu)");
#endif
  OK(lamp_plugin_check_device(single, LAMP_CUDA));
  /* mpi takes cuda buffers through host memory (where MPI was found and it was built). */
  const lamp_plugin_handle *mpi = NULL;
  if (access(LAMP_PLUGIN_BUILD_DIR "/comm/mpi.so", R_OK) == 0) {
    mpi = load(LAMP_KIND_COMM, LAMP_PLUGIN_BUILD_DIR "/comm/mpi.so");
    assert_int_equal(mpi->desc->devices, LAMP_BIT(LAMP_CPU) | LAMP_BIT(LAMP_CUDA));
    OK(lamp_plugin_check_device(mpi, LAMP_CUDA));
    OK(lamp_plugin_check_device(mpi, LAMP_SIM)); /* as the CPU, through the host view */
  }
}

/* An optimizer step on a device the plugin does not declare: the core refuses it first, with
   its message rather than the plugin's ("step called on device 1"). */
static void test_call_on_undeclared_device_is_refused(void **state) {
  (void)state;
  lamp_optim *o = NULL;
  OK(lamp_optim_open(&o, BAD("devcpu"), NULL, 0));
  float params[2] = {1, 2}, grads[2] = {1, 1}, visits[2] = {0, 0};
  float *slots[1] = {visits};
  lamp_optim_segment seg = {0, 2, 1.0f, 1.0f};
  lamp_optim_step step = {.device = LAMP_CUDA, .n = 2, .params = params, .grads = grads,
                          .slots = slots, .segments = &seg, .n_segments = 1, .step = 1,
                          .lr = 0.5, .grad_scale = 1.0};
  assert_error(lamp_optim_apply(o, &step), LAMP_ERR_UNSUPPORTED,
               "devcpu: does not run on cuda (its devices: cpu)");
  assert_true(params[0] == 1.0f && visits[0] == 0.0f);

  /* On the CPU the step runs, with no stream. */
  step.device = LAMP_CPU;
  step.stream = &step; /* the core fills it */
  OK(lamp_optim_apply(o, &step));
  assert_null(step.stream);
  assert_true(params[0] == 0.5f && params[1] == 1.5f && visits[0] == 1.0f && visits[1] == 1.0f);
  lamp_optim_close(o);

  lamp_comm *c = NULL;
  OK(lamp_comm_open(&c, BAD("counting_comm"), NULL, 0));
  float x[2] = {1, 2};
  assert_error(lamp_comm_all_reduce(c, x, 2, LAMP_F32, LAMP_REDUCE_SUM, LAMP_CUDA),
               LAMP_ERR_UNSUPPORTED, "counting_comm: does not run on cuda (its devices: cpu)");
  assert_error(lamp_comm_broadcast(c, x, 2, LAMP_F32, 0, LAMP_CUDA), LAMP_ERR_UNSUPPORTED,
               "counting_comm: does not run on cuda (its devices: cpu)");
  float all[4];
  assert_error(lamp_comm_all_gather(c, x, all, 2, LAMP_F32, LAMP_CUDA), LAMP_ERR_UNSUPPORTED,
               "counting_comm: does not run on cuda (its devices: cpu)");
  lamp_comm_close(c);
}

/* ---- the host view: CPU plugins on the simulated device -------------------------------------- */

static void test_sim_runs_cpu_plugins(void **state) {
  (void)state;
  assert_true(lamp_plugin_runs_on(load(LAMP_KIND_OPTIM, BAD("devcpu")), LAMP_SIM));
  assert_true(lamp_plugin_runs_on(load(LAMP_KIND_OPTIM, BAD("devboth")), LAMP_SIM));
  assert_true(lamp_plugin_runs_on(load(LAMP_KIND_COMM, BAD("abi10")), LAMP_SIM));
  OK(lamp_plugin_check_device(load(LAMP_KIND_OPTIM, "sgd"), LAMP_SIM));
  const lamp_plugin_handle *cuda = load(LAMP_KIND_OPTIM, BAD("devcuda"));
  assert_false(lamp_plugin_runs_on(cuda, LAMP_SIM));
  assert_error(lamp_plugin_check_device(cuda, LAMP_SIM), LAMP_ERR_UNSUPPORTED,
               "devcuda: does not run on sim (its devices: cuda)");
}

/*
** counting_comm (cpu only; SUM doubles, all_gather copies its block twice) on sim buffers. Work
** queued on the device before the call (a scale by 3) must be done before the plugin reads the
** buffer, and the plugin's writes must be what the device's later work sees.
*/
static void test_comm_through_host_view(void **state) {
  (void)state;
  lamp_comm *c = NULL;
  OK(lamp_comm_open(&c, BAD("counting_comm"), NULL, 0));
  const float x[4] = {1, -2, 0.5f, 8};
  float *d = sim_floats(x, 4);
  OK(lamp_scale(LAMP_SIM, d, 4, 3.0f));
  OK(lamp_comm_all_reduce(c, d, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_SIM));
  OK(lamp_scale(LAMP_SIM, d, 4, 0.5f));
  float out[8];
  download(out, d, 4);
  for (size_t i = 0; i < 4; i++) assert_true(out[i] == x[i] * 3.0f);

  OK(lamp_comm_broadcast(c, d, 4, LAMP_F32, 0, LAMP_SIM));

  float *all = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_WORKSPACE, 8 * sizeof *all);
  assert_non_null(all);
  OK(lamp_comm_all_gather(c, d, all, 4, LAMP_F32, LAMP_SIM));
  download(out, all, 8);
  for (size_t i = 0; i < 8; i++) assert_true(out[i] == x[i % 4] * 3.0f);

  /* Host memory handed in as the device's has no host view: refused, not passed on. */
  float host[4] = {0};
  assert_error(lamp_comm_all_reduce(c, host, 4, LAMP_F32, LAMP_REDUCE_SUM, LAMP_SIM),
               LAMP_ERR_INVALID_ARG,
               "counting_comm: all_reduce buffer (%p) is not memory of device sim", (void *)host);
  assert_error(lamp_comm_all_gather(c, d, host, 1, LAMP_F32, LAMP_SIM), LAMP_ERR_INVALID_ARG,
               "counting_comm: all_gather recvbuf (%p) is not memory of device sim", (void *)host);
  lamp_mem_free(all);
  lamp_mem_free(d);
  lamp_comm_close(c);
}

/* The non-blocking form: recording_comm reduces at start and logs; the request comes back. */
static void test_comm_start_through_host_view(void **state) {
  (void)state;
  lamp_comm *c = NULL;
  OK(lamp_comm_open(&c, BAD("recording_comm"), NULL, 0));
  const float x[3] = {1, 2, 3};
  float *d = sim_floats(x, 3);
  lamp_request *req = NULL;
  OK(lamp_comm_all_reduce_start(c, d, 3, LAMP_F32, LAMP_REDUCE_SUM, LAMP_SIM, &req));
  assert_non_null(req);
  OK(lamp_comm_wait(c, req));
  float out[3];
  download(out, d, 3);
  for (size_t i = 0; i < 3; i++) assert_true(out[i] == 2.0f * x[i]);
  lamp_mem_free(d);
  lamp_comm_close(c);
}

/* A plugin built against ABI 1.0 runs on the simulated device too (its devices 0 is the CPU). */
static void test_abi_1_0_plugin_through_host_view(void **state) {
  (void)state;
  lamp_comm *c = NULL;
  OK(lamp_comm_open(&c, BAD("abi10"), NULL, 0));
  const float x[2] = {4, -4};
  float *d = sim_floats(x, 2);
  OK(lamp_comm_all_reduce(c, d, 2, LAMP_F32, LAMP_REDUCE_SUM, LAMP_SIM));
  float out[2];
  download(out, d, 2);
  assert_true(out[0] == 5.0f && out[1] == -3.0f);
  lamp_mem_free(d);
  lamp_comm_close(c);
}

/* devcpu's step on sim slabs: it checks it sees the CPU and no stream, and reaches params,
   grads and its slot; the caller's step keeps its device, its pointers and its slot array. */
static void test_optim_through_host_view(void **state) {
  (void)state;
  lamp_optim *o = NULL;
  OK(lamp_optim_open(&o, BAD("devcpu"), NULL, 0));
  const float p0[3] = {1, 2, 3}, g0[3] = {2, 4, 6}, zero[3] = {0};
  float *params = sim_floats(p0, 3), *grads = sim_floats(g0, 3), *visits = sim_floats(zero, 3);
  float *slots[1] = {visits};
  lamp_optim_segment seg = {0, 3, 1.0f, 1.0f};
  lamp_optim_step step = {.device = LAMP_SIM, .n = 3, .params = params, .grads = grads,
                          .slots = slots, .segments = &seg, .n_segments = 1, .step = 1,
                          .lr = 0.25, .grad_scale = 2.0};
  OK(lamp_optim_apply(o, &step));
  OK(lamp_optim_apply(o, &step));
  assert_int_equal(step.device, LAMP_SIM);
  assert_ptr_equal(step.params, params);
  assert_ptr_equal(step.grads, grads);
  assert_ptr_equal(step.slots, slots);
  assert_ptr_equal(slots[0], visits);
  assert_ptr_equal(step.stream, lamp_device_stream(LAMP_SIM)); /* the core fills it; the plugin, on host views, got none */
  float out[3];
  download(out, params, 3);
  for (size_t i = 0; i < 3; i++) assert_true(out[i] == p0[i] - 2.0f * 0.5f * g0[i]);
  download(out, visits, 3);
  for (size_t i = 0; i < 3; i++) assert_true(out[i] == 2.0f);

  step.slots = NULL;
  assert_error(lamp_optim_apply(o, &step), LAMP_ERR_INVALID_ARG,
               "devcpu: step without its 1 state slots");
  float host[3] = {0};
  float *host_slots[1] = {host};
  step.slots = host_slots;
  assert_error(lamp_optim_apply(o, &step), LAMP_ERR_INVALID_ARG,
               "devcpu: state slot 'visits' (%p) is not memory of device sim", (void *)host);
  lamp_mem_free(params);
  lamp_mem_free(grads);
  lamp_mem_free(visits);
  lamp_optim_close(o);
}

/* The built-in sgd (cpu only) on sim slabs gives the CPU's bits, momentum slot included. */
static void test_sgd_on_sim_matches_cpu(void **state) {
  (void)state;
  enum { N = 37, STEPS = 3 };
  const lamp_option opts[] = {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.01}};
  lamp_optim *o = NULL;
  OK(lamp_optim_open(&o, "sgd", opts, COUNT(opts)));
  float p[N], g[N], m[N] = {0};
  for (size_t i = 0; i < N; i++) {
    p[i] = (float)sin((double)i);
    g[i] = (float)cos(3.0 * (double)i);
  }
  float *dp = sim_floats(p, N), *dg = sim_floats(g, N), *dm = sim_floats(m, N);
  float *host_slots[1] = {m}, *sim_slots[1] = {dm};
  lamp_optim_segment segs[2] = {{0, 20, 1.0f, 1.0f}, {20, N - 20, 0.5f, 0.0f}};
  for (uint64_t s = 1; s <= STEPS; s++) {
    lamp_optim_step cpu = {.device = LAMP_CPU, .n = N, .params = p, .grads = g,
                           .slots = host_slots, .segments = segs, .n_segments = 2, .step = s,
                           .lr = 0.1, .grad_scale = 0.5};
    lamp_optim_step sim = cpu;
    sim.device = LAMP_SIM;
    sim.params = dp;
    sim.grads = dg;
    sim.slots = sim_slots;
    OK(lamp_optim_apply(o, &cpu));
    OK(lamp_optim_apply(o, &sim));
  }
  float out[N];
  download(out, dp, N);
  assert_memory_equal(out, p, sizeof p);
  download(out, dm, N);
  assert_memory_equal(out, m, sizeof m);
  lamp_mem_free(dp);
  lamp_mem_free(dg);
  lamp_mem_free(dm);
  lamp_optim_close(o);
}

/* ---- the host table's device services (ABI 1.1) ---------------------------------------------- */

static void test_host_device_services(void **state) {
  (void)state;
  const lamp_host *host = lamp_host_get();
  assert_int_equal(host->abi_minor, LAMP_ABI_MINOR);
  assert_int_equal(host->struct_size, sizeof(lamp_host));
  assert_true(LAMP_HOST_HAS(host, synchronize));

  assert_int_equal(host->device_count(LAMP_CPU), 1);
  assert_int_equal(host->device_count(LAMP_CUDA), lamp_device_count(LAMP_CUDA));
  assert_int_equal(host->device_ordinal(LAMP_CPU), 0);
  assert_int_equal(host->device_ordinal(LAMP_CUDA), lamp_device_ordinal(LAMP_CUDA));
  if (lamp_device_count(LAMP_CUDA) == 0) assert_int_equal(host->device_ordinal(LAMP_CUDA), -1);
  assert_null(host->stream(LAMP_CPU));
  OK(host->synchronize(LAMP_CPU));

  /* copy: (dst, dst_device, src, src_device, bytes), unlike lamp_copy's order. */
  const float x[3] = {1, 2, 3};
  float y[3] = {0}, *d = lamp_mem_alloc(LAMP_SIM, LAMP_MEM_WORKSPACE, sizeof x);
  assert_non_null(d);
  OK(host->copy(y, LAMP_CPU, x, LAMP_CPU, sizeof x));
  assert_memory_equal(y, x, sizeof x);
  memset(y, 0, sizeof y);
  OK(host->copy(d, LAMP_SIM, x, LAMP_CPU, sizeof x));
  OK(lamp_scale(LAMP_SIM, d, 3, 2.0f));
  OK(host->synchronize(LAMP_SIM));
  OK(host->copy(y, LAMP_CPU, d, LAMP_SIM, sizeof y));
  assert_true(y[0] == 2.0f && y[1] == 4.0f && y[2] == 6.0f);
  lamp_mem_free(d);
}

/* Plugins never see the simulated device: a run on it is a run on the CPU to them. */
static void test_host_run_device(void **state) {
  (void)state;
  const lamp_host *host = lamp_host_get();
  assert_int_equal(host->run_device(), LAMP_CPU);
  OK(lamp_set_run_device(LAMP_SIM));
  assert_int_equal(lamp_run_device(), LAMP_SIM);
  assert_int_equal(host->run_device(), LAMP_CPU);
  OK(lamp_set_run_device(LAMP_CPU));
  assert_int_equal(host->run_device(), LAMP_CPU);
}

/* unscale_and_check takes a host flag on every device; on the simulated one the core checks
   into a device int and copies it back. The flag is set on inf/NaN and left alone otherwise. */
static void test_host_unscale_and_check(void **state) {
  (void)state;
  const lamp_host *host = lamp_host_get();
  const float clean[4] = {2, -4, 8, 0.5f};
  const float dirty[4] = {2, INFINITY, 8, 0.5f};
  float *d = sim_floats(clean, 4);
  int found = 0;
  OK(host->unscale_and_check(LAMP_SIM, d, 4, 0.5f, &found));
  assert_int_equal(found, 0);
  float out[4];
  download(out, d, 4);
  for (size_t i = 0; i < 4; i++) assert_true(out[i] == clean[i] * 0.5f);
  found = 7; /* untouched when clean */
  OK(host->unscale_and_check(LAMP_SIM, d, 4, 1.0f, &found));
  assert_int_equal(found, 7);
  lamp_mem_free(d);

  d = sim_floats(dirty, 4);
  found = 0;
  OK(host->unscale_and_check(LAMP_SIM, d, 4, 0.5f, &found));
  assert_int_equal(found, 1);
  download(out, d, 4);
  assert_true(out[0] == 1.0f && isinf(out[1]) && out[2] == 4.0f);
  lamp_mem_free(d);

  float h[4];
  memcpy(h, dirty, sizeof h);
  found = 0;
  OK(host->unscale_and_check(LAMP_CPU, h, 4, 2.0f, &found));
  assert_int_equal(found, 1);
  assert_true(h[0] == 4.0f && h[3] == 1.0f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_declared_devices),
      cmocka_unit_test(test_no_devices_declared),
      cmocka_unit_test(test_built_ins),
      cmocka_unit_test(test_call_on_undeclared_device_is_refused),
      cmocka_unit_test(test_sim_runs_cpu_plugins),
      cmocka_unit_test(test_comm_through_host_view),
      cmocka_unit_test(test_comm_start_through_host_view),
      cmocka_unit_test(test_abi_1_0_plugin_through_host_view),
      cmocka_unit_test(test_optim_through_host_view),
      cmocka_unit_test(test_sgd_on_sim_matches_cpu),
      cmocka_unit_test(test_host_device_services),
      cmocka_unit_test(test_host_run_device),
      cmocka_unit_test(test_host_unscale_and_check),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
