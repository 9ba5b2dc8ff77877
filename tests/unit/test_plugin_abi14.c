/*
** What ABI 1.4 gave plugin authors, from the plugin's side and the user's: text and enum options
** (declared, validated with exact messages, read through host->option_text), the tensor table an
** optimizer's step sees (on the CPU and, through the host view, on the simulated device),
** host->gemm, plugin-info's lookup by name, the info line for a plugin built against a newer
** minor, and a plugin built against 1.3 that still loads and trains as before.
*/
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "backend/sim/sim.h"
#include "base/error.h"
#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include "nn/loss.h"
#include "plugin/instance.h"
#include "plugin/loader.h"
#include "test_support.h"
#include "train/trainer.h"

#define BAD(name) LAMP_BAD_PLUGIN_DIR "/" name ".so"
#define TMP LAMP_TEST_TMP_DIR "/plugin_abi14"

static void assert_error(lamp_status st, lamp_status code, const char *fmt, ...) {
  char expected[LAMP_ERROR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(expected, sizeof expected, fmt, ap);
  va_end(ap);
  assert_string_equal(lamp_last_error(), expected);
  assert_int_equal(st, code);
}

static const char *real(const char *path) {
  static char buf[2][PATH_MAX];
  static int next;
  char *out = buf[next++ % 2];
  assert_non_null(realpath(path, out));
  return out;
}

/* Opens textopts with fail = "yes" and the options given: create refuses, saying what it read. */
static void assert_read(const lamp_option *nums, size_t n_nums, const lamp_text_option *texts, size_t n_texts,
                        const char *expected) {
  lamp_text_option all[8];
  if (n_texts > 0) memcpy(all, texts, n_texts * sizeof *texts); /* memcpy takes no NULL, even for 0 bytes */
  all[n_texts] = (lamp_text_option){"fail", "yes"};
  const lamp_options given = {nums, n_nums, all, n_texts + 1};
  lamp_optim *o = NULL;
  assert_error(lamp_optim_open_options(&o, BAD("textopts"), &given), LAMP_ERR_INVALID_USAGE, "textopts: %s", expected);
  assert_null(o);
}

/* ---- text options ---------------------------------------------------------------------------- */

static void test_text_options_reach_the_plugin(void **state) {
  (void)state;
  assert_read(NULL, 0, NULL, 0, "lr 0.1, sign 'exact', tag 'none', lr as text NULL, nosuch NULL");
  const lamp_option lr = {"lr", 0.5};
  const lamp_text_option texts[] = {{"tag", "hello world"}, {"sign", "smooth"}};
  assert_read(&lr, 1, texts, 2, "lr 0.5, sign 'smooth', tag 'hello world', lr as text NULL, nosuch NULL");
  const lamp_text_option empty = {"tag", ""};
  assert_read(NULL, 0, &empty, 1, "lr 0.1, sign 'exact', tag '', lr as text NULL, nosuch NULL");
}

/* The object keeps copies: the caller's strings may go once it is open (Lua's do). */
static void test_text_options_are_copied(void **state) {
  (void)state;
  char tag[16] = "first";
  const lamp_text_option texts[] = {{"tag", tag}, {"sign", "smooth"}};
  const lamp_options given = {NULL, 0, texts, 2};
  lamp_optim *o = NULL;
  assert_int_equal(lamp_optim_open_options(&o, BAD("textopts"), &given), LAMP_OK);
  strcpy(tag, "overwritten");
  assert_string_equal(lamp_optim_text(o, "tag"), "first");
  assert_string_equal(lamp_optim_text(o, "sign"), "smooth");
  assert_string_equal(lamp_optim_text(o, "fail"), "no");
  assert_null(lamp_optim_text(o, "lr")); /* a number */
  assert_null(lamp_optim_text(o, "nosuch"));
  double lr = 0.0;
  assert_int_equal(lamp_optim_hparam(o, "lr", &lr), 0);
  assert_true(lr == 0.1);
  lamp_optim_close(o);
}

static void test_text_option_messages(void **state) {
  (void)state;
  lamp_optim *o = NULL;
  const lamp_text_option rough = {"sign", "rough"};
  lamp_options given = {NULL, 0, &rough, 1};
  assert_error(lamp_optim_open_options(&o, BAD("textopts"), &given), LAMP_ERR_INVALID_ARG,
               "textopts: option 'sign' must be one of: exact, smooth; got 'rough'");
  const lamp_text_option mode = {"mode", "fast"};
  given = (lamp_options){NULL, 0, &mode, 1};
  assert_error(lamp_optim_open_options(&o, BAD("textopts"), &given), LAMP_ERR_INVALID_ARG,
               "textopts: unknown option 'mode'; valid options: lr, sign, tag, fail");
  const lamp_option mom = {"mom", 0.9};
  given = (lamp_options){&mom, 1, NULL, 0};
  assert_error(lamp_optim_open_options(&o, BAD("textopts"), &given), LAMP_ERR_INVALID_ARG,
               "textopts: unknown option 'mom'; valid options: lr, sign, tag, fail");
  /* A number for a text option, text for a number: both types named. */
  const lamp_option three = {"sign", 3};
  given = (lamp_options){&three, 1, NULL, 0};
  assert_error(lamp_optim_open_options(&o, BAD("textopts"), &given), LAMP_ERR_INVALID_ARG,
               "textopts: option 'sign' must be a string, one of: exact, smooth; got the number 3");
  const lamp_option half = {"tag", 2.5};
  given = (lamp_options){&half, 1, NULL, 0};
  assert_error(lamp_optim_open_options(&o, BAD("textopts"), &given), LAMP_ERR_INVALID_ARG,
               "textopts: option 'tag' must be a string; got the number 2.5");
  const lamp_text_option fast = {"lr", "fast"};
  given = (lamp_options){NULL, 0, &fast, 1};
  assert_error(lamp_optim_open_options(&o, BAD("textopts"), &given), LAMP_ERR_INVALID_ARG,
               "textopts: option 'lr' must be a number in [0, 10], got the string \"fast\"");
  /* One namespace: a name given as a number and as text is given twice. */
  const lamp_option lr = {"lr", 0.2};
  const lamp_text_option lr_text = {"lr", "0.3"};
  given = (lamp_options){&lr, 1, &lr_text, 1};
  assert_error(lamp_optim_open_options(&o, BAD("textopts"), &given), LAMP_ERR_INVALID_ARG,
               "textopts: option 'lr' given twice");
  const lamp_text_option twice[] = {{"tag", "a"}, {"tag", "b"}};
  given = (lamp_options){NULL, 0, twice, 2};
  assert_error(lamp_optim_open_options(&o, BAD("textopts"), &given), LAMP_ERR_INVALID_ARG,
               "textopts: option 'tag' given twice");
  assert_null(o);
  /* The numbers-only entry point knows the texts too. */
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_OPTIM, BAD("textopts"), &h), LAMP_OK);
  double v = 0.0;
  assert_error(lamp_params_resolve(h->desc, &mom, 1, &v), LAMP_ERR_INVALID_ARG,
               "textopts: unknown option 'mom'; valid options: lr, sign, tag, fail");
  uint32_t n = 0;
  const lamp_text_param *t = lamp_plugin_text_params(h->desc, &n);
  assert_int_equal(n, 3);
  assert_string_equal(t[0].name, "sign");
  char expected[128];
  lamp_text_param_expected(&t[0], expected, sizeof expected);
  assert_string_equal(expected, "a string, one of: exact, smooth");
  lamp_text_param_expected(&t[1], expected, sizeof expected);
  assert_string_equal(expected, "a string");
}

/* Declarations are checked at load, after the numeric ones. */
static void test_bad_text_declarations(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, BAD("badtext"), &h), LAMP_ERR_INVALID_USAGE,
               BAD("badtext") ": text param 'sign' has default 'rough', not one of its choices: exact, smooth");
  assert_error(lamp_plugin_load(LAMP_KIND_OPTIM, BAD("dupname"), &h), LAMP_ERR_INVALID_USAGE,
               BAD("dupname") ": param 'lr' is declared twice");
  /* 1.4 added no required member: every minor needs the same prefix. */
  assert_int_equal(lamp_plugin_required_size(LAMP_KIND_PRECISION, 4), 120);
  assert_int_equal(lamp_plugin_required_size(LAMP_KIND_COMM, 4), 128);
  assert_int_equal(lamp_plugin_required_size(LAMP_KIND_OPTIM, 4), 104);
}

/* ---- older and newer plugins ----------------------------------------------------------------- */

/*
** optim13 was built against 1.3: a 112-byte table. What lies after it in memory looks like 1.4's
** text options; the core must not read them, and the plugin, handed a 1.4 step, reads only what
** 1.3 had and trains as before.
*/
static void test_abi_1_3_optimizer_unchanged(void **state) {
  (void)state;
  lamp_optim *o = NULL;
  const lamp_text_option sign = {"sign", "exact"};
  const lamp_options given = {NULL, 0, &sign, 1};
  assert_error(lamp_optim_open_options(&o, BAD("optim13"), &given), LAMP_ERR_INVALID_ARG,
               "optim13: unknown option 'sign'; valid options: lr");
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_load(LAMP_KIND_OPTIM, BAD("optim13"), &h), LAMP_OK);
  uint32_t n = 7;
  assert_null(lamp_plugin_text_params(h->desc, &n));
  assert_int_equal(n, 0);

  const lamp_option lr = {"lr", 0.5};
  assert_int_equal(lamp_optim_open(&o, BAD("optim13"), &lr, 1), LAMP_OK);
  float params[3] = {1.0f, 2.0f, 3.0f}, grads[3] = {1.0f, -2.0f, 4.0f};
  const lamp_optim_segment seg = {0, 3, 1.0f, 1.0f};
  const int64_t shape = 3;
  const lamp_optim_tensor tensor = {"w", 1, &shape, 0, 3, 0};
  lamp_optim_step s = {.device = LAMP_CPU, .n = 3, .params = params, .grads = grads, .segments = &seg,
                       .n_segments = 1, .step = 1, .lr = 0.5, .grad_scale = 0.5, .tensors = &tensor, .n_tensors = 1};
  assert_int_equal(lamp_optim_apply(o, &s), LAMP_OK);
  assert_true(params[0] == 0.75f && params[1] == 2.5f && params[2] == 2.0f);
  assert_int_equal(s.struct_size, sizeof(lamp_optim_step));
  lamp_optim_close(o);
}

/* Log capture. */
static char captured[16][1024];
static int n_captured;

static void capture(lamp_log_level level, const char *line, void *ud) {
  (void)level, (void)ud;
  if (n_captured < 16) snprintf(captured[n_captured++], sizeof captured[0], "%s", line);
}

static void copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  assert_non_null(in);
  assert_non_null(out);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) assert_int_equal(fwrite(buf, 1, n, out), n);
  fclose(in);
  assert_int_equal(fclose(out), 0);
  assert_int_equal(chmod(to, 0644), 0);
}

/* Loaded for use, a plugin built for a newer minor is said so once, at info level, after its line;
   plugin-info's inspection logs nothing. A fresh copy: the cache announces a plugin once. */
static void test_newer_minor_is_announced(void **state) {
  (void)state;
  copy_file(BAD("newerminor"), TMP "/newerminor.so");
  n_captured = 0;
  lamp_log_set_level(LAMP_LOG_INFO);
  lamp_log_set_sink(capture, NULL);
  const lamp_plugin_handle *h = NULL;
  assert_int_equal(lamp_plugin_inspect(TMP "/newerminor.so", &h), LAMP_OK);
  assert_int_equal(n_captured, 0);
  assert_int_equal(lamp_plugin_load(LAMP_KIND_OPTIM, TMP "/newerminor.so", &h), LAMP_OK);
  assert_int_equal(lamp_plugin_load(LAMP_KIND_OPTIM, TMP "/newerminor.so", &h), LAMP_OK);
  lamp_log_set_sink(NULL, NULL);
  lamp_log_set_level(LAMP_LOG_WARN);
  assert_int_equal(n_captured, 2);
  char first[PATH_MAX + 64];
  snprintf(first, sizeof first, "optim: newerminor 0.1 (ABI 1.7) from %s", real(TMP "/newerminor.so"));
  assert_string_equal(captured[0], first);
  assert_string_equal(captured[1], "newerminor: built for plugin ABI 1.7, this core has 1.4: members it added are ignored");
}

/* ---- plugin-info by name --------------------------------------------------------------------- */

static void test_inspect_by_name(void **state) {
  (void)state;
  const lamp_plugin_handle *h = NULL;
  /* The built-ins, each found under its own kind. */
  assert_int_equal(lamp_plugin_inspect("adamw", &h), LAMP_OK);
  assert_int_equal(h->kind, LAMP_KIND_OPTIM);
  assert_string_equal(h->path, real(LAMP_PLUGIN_BUILD_DIR "/optim/adamw.so"));
  assert_int_equal(lamp_plugin_inspect("single", &h), LAMP_OK);
  assert_int_equal(h->kind, LAMP_KIND_COMM);
  /* Through LAMP_PLUGIN_PATH; a template without '!' gives every kind the same candidate. */
  setenv("LAMP_PLUGIN_PATH", LAMP_BAD_PLUGIN_DIR "/?.so", 1);
  assert_int_equal(lamp_plugin_inspect("textopts", &h), LAMP_OK);
  assert_string_equal(h->desc->name, "textopts");
  assert_string_equal(h->path, real(BAD("textopts")));
  assert_error(lamp_plugin_inspect("nosuch", &h), LAMP_ERR_INVALID_USAGE,
               "no precision, comm or optim plugin 'nosuch' found; tried:\n  " LAMP_BAD_PLUGIN_DIR "/nosuch.so\n"
               "  " LAMP_PLUGIN_BUILD_DIR "/precision/nosuch.so\n  " LAMP_PLUGIN_BUILD_DIR "/comm/nosuch.so\n"
               "  " LAMP_PLUGIN_BUILD_DIR "/optim/nosuch.so");
  /* The file found must declare the name asked for. */
  copy_file(BAD("lion"), TMP "/adam.so");
  setenv("LAMP_PLUGIN_PATH", TMP "/?.so", 1);
  assert_error(lamp_plugin_inspect("adam", &h), LAMP_ERR_INVALID_USAGE,
               TMP "/adam.so: asked for optim 'adam', the plugin declares itself 'lion'");
  unsetenv("LAMP_PLUGIN_PATH");
  assert_error(lamp_plugin_inspect("", &h), LAMP_ERR_INVALID_ARG, "empty plugin name");
}

/* ---- the tensor table and host->gemm --------------------------------------------------------- */

#define BATCH 8

/* One step of the 12-16-5 MLP with tensortable on `device`: its refusal says what it saw. */
static void train_tensortable(lamp_device device) {
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_optim *optim;
  lamp_loss *loss;
  OK(lamp_precision_open(&prec, "fp32", NULL, 0));
  OK(lamp_comm_open(&comm, "single", NULL, 0));
  OK(lamp_optim_open(&optim, BAD("tensortable"), NULL, 0));
  OK(lamp_cross_entropy_new(&loss));
  lamp_layer *net = seq(3, (lamp_layer *[]){linear(12, 16), relu(), linear(16, 5)});
  lamp_trainer_config c = {.model = net, .loss = loss, .precision = prec, .comm = comm, .optim = optim,
                           .device = device, .accum = 1, .seed = 3};
  lamp_trainer *t;
  OK(lamp_trainer_new(&t, &c));
  OK(lamp_trainer_set_param_options(t, 2, 0.5, 1)); /* the second weight: its segment says so */
  lamp_tensor *x = new_tensor(LAMP_F32, 2, (int64_t[]){BATCH, 12}), *y = new_tensor(LAMP_I32, 1, (int64_t[]){BATCH});
  lamp_rng g;
  lamp_rng_seed(&g, 7);
  fill_uniform(x, &g, -1, 1);
  for (int i = 0; i < BATCH; i++) ((int32_t *)lamp_tensor_data(y))[i] = i % 5;
  assert_error(lamp_trainer_step(t, x, y), LAMP_ERR_INVALID_USAGE,
               "tensortable: step 1 on cpu saw 4 tensors over 293 elements: "
               "0.weight 16x12 at 0+192 segment 0 (lr 1, decay 1); 0.bias 16 at 192+16 segment 1 (lr 1, decay 0); "
               "2.weight 5x16 at 208+80 segment 2 (lr 0.5, decay 1); 2.bias 5 at 288+5 segment 3 (lr 1, decay 0); "
               "gemm trace(W W^T) matches");
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  lamp_trainer_free(t);
  lamp_layer_release(net);
  lamp_loss_release(loss);
  lamp_optim_close(optim);
  lamp_comm_close(comm);
  lamp_precision_close(prec);
  OK(lamp_set_run_device(LAMP_CPU));
}

/* The simulated device reaches a CPU plugin through the host view: the same table, the same
   gemm (on the memory it is handed, as cpu). */
static void test_tensor_table_seen_by_the_step(void **state) {
  (void)state;
  train_tensortable(LAMP_CPU);
  train_tensortable(LAMP_SIM);
}

/* The core checks a table it is handed as it checks the segments. */
static void test_tensor_table_checked(void **state) {
  (void)state;
  lamp_optim *o = NULL;
  OK(lamp_optim_open(&o, "sgd", NULL, 0));
  float params[6] = {0}, grads[6] = {0};
  const lamp_optim_segment segs[2] = {{0, 4, 1.0f, 1.0f}, {4, 2, 1.0f, 0.0f}};
  const int64_t shape_w[2] = {2, 2}, shape_b[1] = {2}, shape_bad[1] = {3};
  lamp_optim_tensor tensors[2] = {{"w", 2, shape_w, 0, 4, 0}, {"b", 1, shape_b, 4, 2, 1}};
  lamp_optim_step s = {.device = LAMP_CPU, .n = 6, .params = params, .grads = grads, .segments = segs,
                       .n_segments = 2, .step = 1, .lr = 0.1, .grad_scale = 1.0, .tensors = tensors, .n_tensors = 2};
  assert_int_equal(lamp_optim_apply(o, &s), LAMP_OK);
  tensors[1].offset = 3;
  assert_error(lamp_optim_apply(o, &s), LAMP_ERR_INVALID_ARG, "sgd: step tensor 1 ('b') starts at 3, expected 4");
  tensors[1].offset = 4;
  tensors[1].shape = shape_bad;
  assert_error(lamp_optim_apply(o, &s), LAMP_ERR_INVALID_ARG, "sgd: step tensor 1 ('b') has 2 elements, its shape 3");
  tensors[1].shape = shape_b;
  tensors[1].segment = 0;
  assert_error(lamp_optim_apply(o, &s), LAMP_ERR_INVALID_ARG, "sgd: step tensor 1 ('b') lies outside its segment 0");
  tensors[1].segment = 1;
  s.n_tensors = 1;
  assert_error(lamp_optim_apply(o, &s), LAMP_ERR_INVALID_ARG, "sgd: step tensors cover 4 of 6 elements");
  s.tensors = NULL;
  assert_error(lamp_optim_apply(o, &s), LAMP_ERR_INVALID_ARG, "sgd: step has 1 tensors but no tensor table");
  s.n_tensors = 0; /* a step built by hand, without a model: no table */
  assert_int_equal(lamp_optim_apply(o, &s), LAMP_OK);
  lamp_optim_close(o);
}

/* op(X)[i][j] of a row-major stored X with row stride ld. */
static float at(const float *x, size_t ld, int trans, size_t i, size_t j) { return trans ? x[j * ld + i] : x[i * ld + j]; }

/* host->gemm against a plain triple loop in double, every transpose, strides wider than the
   rows, beta folding C in; on `device`, with its memory. */
static void check_gemm(lamp_device device) {
  const lamp_host *host = lamp_host_get();
  enum { M = 5, N = 7, K = 3, LD = 9 };
  float a[LD * LD], b[LD * LD], c0[M * LD], c[M * LD];
  lamp_rng g;
  lamp_rng_seed(&g, 11);
  for (int i = 0; i < LD * LD; i++) a[i] = (float)(lamp_rng_uniform(&g) - 0.5), b[i] = (float)(lamp_rng_uniform(&g) - 0.5);
  for (int i = 0; i < M * LD; i++) c0[i] = (float)(lamp_rng_uniform(&g) - 0.5);
  float *da = lamp_mem_alloc(device, LAMP_MEM_WORKSPACE, sizeof a), *db = lamp_mem_alloc(device, LAMP_MEM_WORKSPACE, sizeof b);
  float *dc = lamp_mem_alloc(device, LAMP_MEM_WORKSPACE, sizeof c);
  assert_true(da != NULL && db != NULL && dc != NULL);
  OK(host->copy(da, device, a, LAMP_CPU, sizeof a));
  OK(host->copy(db, device, b, LAMP_CPU, sizeof b));
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      OK(host->copy(dc, device, c0, LAMP_CPU, sizeof c0));
      OK(host->gemm(device, ta, tb, M, N, K, 0.5f, da, LD, db, LD, 2.0f, dc, LD));
      OK(host->copy(c, LAMP_CPU, dc, device, sizeof c));
      for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
          double want = 2.0 * c0[i * LD + j];
          for (size_t k = 0; k < K; k++) want += 0.5 * (double)at(a, LD, ta, i, k) * at(b, LD, tb, k, j);
          assert_true(fabs(c[i * LD + j] - want) < 1e-5);
        }
      for (size_t i = 0; i < M; i++) /* past n, the stride's slack is left alone */
        assert_memory_equal(c + i * LD + N, c0 + i * LD + N, (LD - N) * sizeof(float));
    }
  /* The core's refusals, as statuses (the message is the core's). */
  assert_int_equal(host->gemm(device, 0, 0, M, N, K, 1.0f, da, K - 1, db, LD, 0.0f, dc, LD), LAMP_ERR_INVALID_ARG);
  assert_string_equal(lamp_last_error(), "gemm: lda = 2 is smaller than the row length 3");
  OK(host->synchronize(device));
  lamp_mem_free(da);
  lamp_mem_free(db);
  lamp_mem_free(dc);
}

static void test_host_gemm(void **state) {
  (void)state;
  const lamp_host *host = lamp_host_get();
  assert_true(LAMP_HOST_HAS(host, gemm));
  check_gemm(LAMP_CPU);
  check_gemm(LAMP_SIM);
  if (lamp_device_count(LAMP_CUDA) > 0) { /* queued on the core's stream; cuBLAS in fp32, no TF32 */
    check_gemm(LAMP_CUDA);
  } else { /* a device without a backend or a driver here */
    float x = 1.0f;
    assert_int_equal(host->gemm(LAMP_CUDA, 0, 0, 1, 1, 1, 1.0f, &x, 1, &x, 1, 0.0f, &x, 1), LAMP_ERR_UNSUPPORTED);
  }
}

/* ---- checkpoints ----------------------------------------------------------------------------- */

static lamp_trainer *textopts_trainer(const char *sign, lamp_optim **optim, lamp_precision **prec, lamp_comm **comm,
                                      lamp_loss **loss, lamp_layer **net) {
  const lamp_text_option texts[] = {{"sign", sign}, {"tag", "run 7"}};
  const lamp_options given = {NULL, 0, texts, 2};
  OK(lamp_precision_open(prec, "fp32", NULL, 0));
  OK(lamp_comm_open(comm, "single", NULL, 0));
  OK(lamp_optim_open_options(optim, BAD("textopts"), &given));
  OK(lamp_cross_entropy_new(loss));
  *net = seq(1, (lamp_layer *[]){linear(4, 3)});
  lamp_trainer_config c = {.model = *net, .loss = *loss, .precision = *prec, .comm = *comm, .optim = *optim,
                           .device = LAMP_CPU, .accum = 1, .seed = 3};
  lamp_trainer *t;
  OK(lamp_trainer_new(&t, &c));
  return t;
}

static void close_textopts_trainer(lamp_trainer *t, lamp_optim *optim, lamp_precision *prec, lamp_comm *comm,
                                   lamp_loss *loss, lamp_layer *net) {
  lamp_trainer_free(t);
  lamp_layer_release(net);
  lamp_loss_release(loss);
  lamp_optim_close(optim);
  lamp_comm_close(comm);
  lamp_precision_close(prec);
}

/* A checkpoint records the text options beside the numbers; resuming with another says so. */
static void test_checkpoint_records_text_options(void **state) {
  (void)state;
  lamp_optim *optim;
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_loss *loss;
  lamp_layer *net;
  lamp_trainer *t = textopts_trainer("smooth", &optim, &prec, &comm, &loss, &net);
  OK(lamp_trainer_save(t, TMP "/textopts.ckpt", NULL, 0));
  close_textopts_trainer(t, optim, prec, comm, loss, net);
  lamp_ckpt *c;
  OK(lamp_ckpt_open(&c, TMP "/textopts.ckpt"));
  const char *v = NULL;
  OK(lamp_ckpt_meta_str(c, "run.optim.sign", &v));
  assert_string_equal(v, "smooth");
  OK(lamp_ckpt_meta_str(c, "run.optim.tag", &v));
  assert_string_equal(v, "run 7");
  double lr = 0.0;
  OK(lamp_ckpt_meta_double(c, "run.optim.lr", &lr));
  assert_true(lr == 0.1);
  lamp_ckpt_close(c);

  t = textopts_trainer("exact", &optim, &prec, &comm, &loss, &net);
  n_captured = 0;
  lamp_log_set_sink(capture, NULL);
  int found = 0;
  OK(lamp_trainer_resume(t, TMP "/textopts.ckpt", NULL, 0, &found));
  lamp_log_set_sink(NULL, NULL);
  assert_true(found);
  int warned = 0;
  for (int i = 0; i < n_captured; i++)
    warned += strstr(captured[i], ": optimizer option 'sign' was 'smooth', now 'exact'") != NULL;
  assert_int_equal(warned, 1);
  close_textopts_trainer(t, optim, prec, comm, loss, net);
}

static int setup(void **state) {
  (void)state;
  unsetenv("LAMP_PLUGIN_PATH");
  unsetenv("LAMP_PLUGIN_DIR");
  lamp_log_set_level(LAMP_LOG_WARN);
  mkdir(LAMP_TEST_TMP_DIR, 0755);
  mkdir(TMP, 0755);
  chmod(TMP, 0755);
  return lamp_backend_register(LAMP_SIM, &lamp_sim_backend) == LAMP_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  lamp_backend_release_workspace();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_text_options_reach_the_plugin),
      cmocka_unit_test(test_text_options_are_copied),
      cmocka_unit_test(test_text_option_messages),
      cmocka_unit_test(test_bad_text_declarations),
      cmocka_unit_test(test_abi_1_3_optimizer_unchanged),
      cmocka_unit_test(test_newer_minor_is_announced),
      cmocka_unit_test(test_inspect_by_name),
      cmocka_unit_test(test_tensor_table_seen_by_the_step),
      cmocka_unit_test(test_tensor_table_checked),
      cmocka_unit_test(test_host_gemm),
      cmocka_unit_test(test_checkpoint_records_text_options),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
