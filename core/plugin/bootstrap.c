/*
** The bootstrap as a communicator sees it (lamp_bootstrap): the choice of transport from the
** environment, the argument checks and numbering every call shares, the host identities behind
** local_rank, and the single-rank case, where every call is trivial.
*/
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/launcher.h"
#include "base/log.h"
#include "plugin/bootstrap.h"
#include "plugin/instance.h"

#define WHO "bootstrap"
#define DEFAULT_TIMEOUT 300.0
#define MAX_WORLD 1048576

typedef struct boot {
  lamp_bootstrap pub; /* first: the plugin's pointer is the core's object */
  lamp_boot_transport t;
  unsigned long seq; /* collectives so far; the next one's number */
  char failure[LAMP_ERROR_MAX];
} boot;

static boot *of(const lamp_bootstrap *b) { return (boot *)(uintptr_t)b; }

/* ---- the calls a plugin makes ---------------------------------------------------------------- */

/* Keeps the message lamp_error recorded, for the core to name when the plugin returns the
   status without one. */
static lamp_status record(boot *b, lamp_status st) {
  if (st != LAMP_OK) snprintf(b->failure, sizeof b->failure, "%s", lamp_last_error());
  return st;
}

static lamp_status check_timeout(boot *b, const char *op, double timeout_s) {
  if (timeout_s > 0 && isfinite(timeout_s)) return LAMP_OK;
  return record(b, lamp_error(LAMP_ERR_INVALID_ARG, "bootstrap: %s %lu: timeout must be a positive number of seconds, got %g",
                              op, b->seq, timeout_s));
}

static lamp_status check_buffer(boot *b, const char *op, const char *what, const void *p, size_t bytes) {
  if (p != NULL || bytes == 0) return LAMP_OK;
  return record(b, lamp_error(LAMP_ERR_INVALID_ARG, "bootstrap: %s %lu: NULL %s for %zu bytes", op, b->seq,
                              what, bytes));
}

static lamp_status boot_broadcast(const lamp_bootstrap *pub, void *buf, size_t bytes, int root, double timeout_s) {
  boot *b = of(pub);
  lamp_status st = check_timeout(b, "broadcast", timeout_s);
  if (st == LAMP_OK) st = check_buffer(b, "broadcast", "buffer", buf, bytes);
  if (st == LAMP_OK && (root < 0 || root >= b->t.size))
    st = record(b, lamp_error(LAMP_ERR_INVALID_ARG, "bootstrap: broadcast %lu: root %d is not a rank of %d", b->seq,
                              root, b->t.size));
  if (st != LAMP_OK) return st;
  return record(b, b->t.broadcast(b->t.state, b->seq++, buf, bytes, root, timeout_s));
}

static lamp_status boot_all_gather(const lamp_bootstrap *pub, const void *send, void *recv, size_t bytes,
                                   double timeout_s) {
  boot *b = of(pub);
  lamp_status st = check_timeout(b, "all_gather", timeout_s);
  if (st == LAMP_OK) st = check_buffer(b, "all_gather", "send buffer", send, bytes);
  if (st == LAMP_OK) st = check_buffer(b, "all_gather", "receive buffer", recv, bytes);
  if (st == LAMP_OK && bytes > SIZE_MAX / (size_t)b->t.size)
    st = record(b, lamp_error(LAMP_ERR_INVALID_ARG, "bootstrap: all_gather %lu: %zu bytes from each of %d ranks overflow",
                              b->seq, bytes, b->t.size));
  if (st != LAMP_OK) return st;
  return record(b, b->t.all_gather(b->t.state, b->seq++, send, recv, bytes, timeout_s));
}

static lamp_status boot_barrier(const lamp_bootstrap *pub, double timeout_s) {
  boot *b = of(pub);
  lamp_status st = check_timeout(b, "barrier", timeout_s);
  if (st != LAMP_OK) return st;
  return record(b, b->t.barrier(b->t.state, b->seq++, timeout_s));
}

/* ---- one rank -------------------------------------------------------------------------------- */

static lamp_status single_broadcast(void *state, unsigned long seq, void *buf, size_t bytes, int root,
                                    double timeout_s) {
  (void)state, (void)seq, (void)buf, (void)bytes, (void)root, (void)timeout_s;
  return LAMP_OK;
}

static lamp_status single_all_gather(void *state, unsigned long seq, const void *send, void *recv, size_t bytes,
                                     double timeout_s) {
  (void)state, (void)seq, (void)timeout_s;
  if (bytes > 0) memmove(recv, send, bytes);
  return LAMP_OK;
}

static lamp_status single_barrier(void *state, unsigned long seq, double timeout_s) {
  (void)state, (void)seq, (void)timeout_s;
  return LAMP_OK;
}

static void single_close(void *state) { (void)state; }

static void single_open(lamp_boot_transport *t) {
  snprintf(t->name, sizeof t->name, "single rank");
  t->rank = 0;
  t->size = 1;
  t->state = NULL;
  t->broadcast = single_broadcast;
  t->all_gather = single_all_gather;
  t->barrier = single_barrier;
  t->close = single_close;
}

/* ---- building one ---------------------------------------------------------------------------- */

double lamp_bootstrap_default_timeout(void) {
  const char *env = getenv("LAMP_COMM_TIMEOUT");
  if (env == NULL || env[0] == '\0') return DEFAULT_TIMEOUT;
  char *end = NULL;
  double v = strtod(env, &end);
  return end != env && *end == '\0' && v > 0 && isfinite(v) ? v : DEFAULT_TIMEOUT;
}

/* Every rank learns every host identity; local_rank numbers the ranks of each host. */
static lamp_status find_local_ranks(boot *b, double timeout_s) {
  int size = b->t.size;
  char *ids = calloc((size_t)size, LAMP_HOST_ID_BYTES);
  if (ids == NULL) return lamp_error(LAMP_ERR_SYSTEM, "bootstrap: out of memory for %d host identities", size);
  char mine[LAMP_HOST_ID_BYTES];
  lamp_host_identity(mine);
  lamp_status st = boot_all_gather(&b->pub, mine, ids, LAMP_HOST_ID_BYTES, timeout_s);
  if (st == LAMP_OK) lamp_host_local_rank(ids, size, b->t.rank, &b->pub.local_rank, &b->pub.local_size);
  free(ids);
  return st;
}

/* Wraps an opened transport; closes it on failure. */
static lamp_status finish_open(lamp_bootstrap **out, const lamp_boot_transport *t, double timeout_s) {
  boot *b = calloc(1, sizeof *b);
  if (b == NULL) {
    t->close(t->state);
    return lamp_error(LAMP_ERR_SYSTEM, "bootstrap: out of memory");
  }
  b->t = *t;
  b->pub.struct_size = sizeof b->pub;
  b->pub.rank = t->rank;
  b->pub.size = t->size;
  b->pub.impl = b;
  b->pub.broadcast = boot_broadcast;
  b->pub.all_gather = boot_all_gather;
  b->pub.barrier = boot_barrier;
  lamp_status st = find_local_ranks(b, timeout_s);
  if (st != LAMP_OK) {
    lamp_bootstrap_close(&b->pub);
    return st;
  }
  lamp_log(LAMP_LOG_INFO, WHO, "rank %d of %d (local %d of %d) over %s", b->pub.rank, b->pub.size,
           b->pub.local_rank, b->pub.local_size, b->t.name);
  *out = &b->pub;
  return LAMP_OK;
}

lamp_status lamp_bootstrap_open_file(lamp_bootstrap **out, const char *dir, const char *tag, int rank, int size,
                                     double timeout_s) {
  *out = NULL;
  lamp_boot_transport t;
  memset(&t, 0, sizeof t);
  lamp_status st = lamp_boot_file_open(&t, dir, tag, rank, size, timeout_s);
  return st == LAMP_OK ? finish_open(out, &t, timeout_s) : st;
}

static lamp_status open_over_mpi(lamp_boot_transport *t, const char *var) {
  lamp_comm *mpi = NULL;
  lamp_status st = lamp_comm_open(&mpi, "mpi", NULL, 0);
  if (st != LAMP_OK)
    return lamp_error_context(st, "bootstrap: launched under mpirun (%s is set), so over the mpi communicator", var);
  return lamp_boot_comm_open(t, mpi);
}

/* The first of the variables that is set: its name in *which, its value; NULL when none is. */
static const char *first_env(const char *a, const char *b, const char **which) {
  const char *v = getenv(a);
  *which = a;
  if (v != NULL && v[0] != '\0') return v;
  v = getenv(b);
  *which = b;
  return v != NULL && v[0] != '\0' ? v : NULL;
}

static lamp_status parse_int(const char *var, const char *text, long lo, long hi, int *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "bootstrap: %s must be an integer in [%ld, %ld], got '%s'", var, lo, hi,
                      text);
  *out = (int)v;
  return LAMP_OK;
}

/* The run's name in the store: LAMP_RUN_ID, else torchrun's TORCHELASTIC_RUN_ID, else "lamp". */
static const char *run_tag(void) {
  const char *which = NULL;
  const char *v = first_env("LAMP_RUN_ID", "TORCHELASTIC_RUN_ID", &which);
  return v != NULL ? v : "lamp";
}

/* LAMP_WORLD_SIZE / WORLD_SIZE above 1: the file store. *size is 1 when neither is set. */
static lamp_status open_from_env(lamp_boot_transport *t, double timeout_s, int *size) {
  const char *var = NULL;
  const char *text = first_env("LAMP_WORLD_SIZE", "WORLD_SIZE", &var);
  *size = 1;
  if (text == NULL) return LAMP_OK;
  lamp_status st = parse_int(var, text, 1, MAX_WORLD, size);
  if (st != LAMP_OK || *size == 1) return st;
  const char *rank_var = NULL;
  const char *rank_text = first_env("LAMP_RANK", "RANK", &rank_var);
  if (rank_text == NULL)
    return lamp_error(LAMP_ERR_INVALID_USAGE, "bootstrap: %s=%d but neither LAMP_RANK nor RANK is set", var, *size);
  int rank = 0;
  st = parse_int(rank_var, rank_text, 0, *size - 1, &rank);
  if (st != LAMP_OK) return st;
  const char *dir = getenv("LAMP_STORE_DIR");
  if (dir == NULL || dir[0] == '\0')
    return lamp_error(LAMP_ERR_INVALID_USAGE,
                      "bootstrap: %s=%d without mpirun needs LAMP_STORE_DIR, a folder every rank can reach", var,
                      *size);
  /* Every rank opens its bootstraps in the same order: the count tells a run's apart. */
  static unsigned long opened;
  char tag[160];
  snprintf(tag, sizeof tag, "%.100s.%lu", run_tag(), opened++);
  return lamp_boot_file_open(t, dir, tag, rank, *size, timeout_s);
}

lamp_status lamp_bootstrap_open(lamp_bootstrap **out, double timeout_s) {
  *out = NULL;
  lamp_boot_transport t;
  memset(&t, 0, sizeof t);
  const char *var = lamp_launcher_mpi_var();
  lamp_status st = LAMP_OK;
  if (var != NULL) {
    st = open_over_mpi(&t, var);
  } else {
    int size = 1;
    st = open_from_env(&t, timeout_s, &size);
    if (st == LAMP_OK && size == 1) single_open(&t);
  }
  return st == LAMP_OK ? finish_open(out, &t, timeout_s) : st;
}

void lamp_bootstrap_close(lamp_bootstrap *pub) {
  if (pub == NULL) return;
  boot *b = of(pub);
  b->t.close(b->t.state);
  free(b);
}

const char *lamp_bootstrap_transport(const lamp_bootstrap *b) { return of(b)->t.name; }

int lamp_bootstrap_close_waits(const lamp_bootstrap *b) { return b != NULL && of(b)->t.close_waits; }

const char *lamp_bootstrap_failure(const lamp_bootstrap *b) { return of(b)->failure; }

void lamp_bootstrap_clear_failure(lamp_bootstrap *b) { of(b)->failure[0] = '\0'; }
