/*
** The fp32 path must stay bit-identical as precision policies are added: 30 training steps of a
** small MLP on synthetic data, hashed (every weight bit and every loss), compared against the
** hash recorded before mixed precision existed. GEMM results depend on the OpenBLAS kernel, so
** hashes are recorded per kernel (tests/data/fp32_golden.txt: "<core> <hash>"); a kernel with
** no recorded hash is skipped and its hash printed for recording.
*/
#include <cblas.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "base/log.h"
#include "tensor/rng.h"
#include "train/trainer.h"

#define BATCH 32
#define IN 20
#define HIDDEN 48
#define CLASSES 5
#define STEPS 30

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

static void fill_batch(lamp_rng *rng, lamp_tensor *x, lamp_tensor *y) {
  float *xd = lamp_tensor_data(x);
  int32_t *yd = lamp_tensor_data(y);
  for (size_t i = 0; i < BATCH * IN; i++) xd[i] = (float)lamp_rng_normal(rng);
  for (size_t i = 0; i < BATCH; i++) yd[i] = (int32_t)lamp_rng_below(rng, CLASSES);
}

static uint64_t train_and_hash(void) {
  lamp_precision *prec;
  lamp_comm *comm;
  lamp_optim *optim;
  lamp_option sgd_opts[] = {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 1e-3}};
  assert_int_equal(lamp_precision_open(&prec, "fp32", NULL, 0), LAMP_OK);
  assert_int_equal(lamp_comm_open(&comm, "single", NULL, 0), LAMP_OK);
  assert_int_equal(lamp_optim_open(&optim, "sgd", sgd_opts, 3), LAMP_OK);
  lamp_layer *l1, *relu, *l2, *model;
  assert_int_equal(lamp_linear_new(&l1, IN, HIDDEN, 1), LAMP_OK);
  assert_int_equal(lamp_relu_new(&relu), LAMP_OK);
  assert_int_equal(lamp_linear_new(&l2, HIDDEN, CLASSES, 1), LAMP_OK);
  lamp_layer *children[] = {l1, relu, l2};
  assert_int_equal(lamp_sequential_new(&model, children, 3), LAMP_OK);
  lamp_loss *loss;
  assert_int_equal(lamp_cross_entropy_new(&loss), LAMP_OK);
  lamp_trainer_config cfg = {.model = model, .loss = loss, .precision = prec, .comm = comm, .optim = optim,
                             .device = LAMP_CPU, .accum = 1, .clip = 0.0,
                             .schedule = {.kind = LAMP_SCHEDULE_COSINE, .total = STEPS}, .seed = 11};
  lamp_trainer *t;
  assert_int_equal(lamp_trainer_new(&t, &cfg), LAMP_OK);
  lamp_tensor *x, *y;
  int64_t xs[2] = {BATCH, IN}, ys[1] = {BATCH};
  assert_int_equal(lamp_tensor_new(&x, LAMP_F32, LAMP_CPU, 2, xs, LAMP_MEM_DATA), LAMP_OK);
  assert_int_equal(lamp_tensor_new(&y, LAMP_I32, LAMP_CPU, 1, ys, LAMP_MEM_DATA), LAMP_OK);
  lamp_rng rng;
  lamp_rng_seed(&rng, 5);
  uint64_t h = 0xcbf29ce484222325ull;
  for (int s = 0; s < STEPS; s++) {
    fill_batch(&rng, x, y);
    assert_int_equal(lamp_trainer_step(t, x, y), LAMP_OK);
    lamp_trainer_stats st;
    assert_int_equal(lamp_trainer_stats_get(t, &st), LAMP_OK);
    h = fnv1a(h, &st.last_loss, sizeof st.last_loss);
  }
  lamp_tensor *w = lamp_model_weights(lamp_trainer_model(t));
  h = fnv1a(h, lamp_tensor_data(w), lamp_tensor_nbytes(w));
  lamp_tensor_release(x);
  lamp_tensor_release(y);
  lamp_trainer_free(t);
  lamp_loss_release(loss);
  lamp_layer_release(model);
  lamp_layer_release(l1);
  lamp_layer_release(relu);
  lamp_layer_release(l2);
  lamp_optim_close(optim);
  lamp_comm_close(comm);
  lamp_precision_close(prec);
  return h;
}

static int recorded_hash(const char *core, uint64_t *out) {
  FILE *f = fopen(LAMP_TEST_DATA_DIR "/fp32_golden.txt", "r");
  if (f == NULL) return 0;
  char line[256], name[128];
  unsigned long long h;
  int found = 0;
  while (!found && fgets(line, sizeof line, f) != NULL)
    if (line[0] != '#' && sscanf(line, "%127s %llx", name, &h) == 2 && strcmp(name, core) == 0) found = 1;
  fclose(f);
  if (found) *out = (uint64_t)h;
  return found;
}

static void test_fp32_training_is_bit_identical(void **state) {
  (void)state;
  lamp_log_set_level(LAMP_LOG_WARN);
  uint64_t first = train_and_hash();
  assert_true(first == train_and_hash()); /* deterministic within a run, whatever the kernel */
  const char *core = openblas_get_corename();
  uint64_t want;
  if (!recorded_hash(core, &want)) {
    print_message("no fp32 golden hash recorded for OpenBLAS core %s; this run: %s %016llx\n", core, core,
                  (unsigned long long)first);
    skip();
  }
  if (first != want)
    fail_msg("fp32 training changed: hash %016llx, recorded %016llx for core %s", (unsigned long long)first,
             (unsigned long long)want, core);
}

int main(void) {
  setenv("LAMP_GEMM", "openblas", 1); /* the hashes are OpenBLAS's, whatever the user's default */
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_fp32_training_is_bit_identical)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
