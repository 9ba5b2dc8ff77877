#include "train/agree.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tensor/memory.h"

void lamp_agree_init(lamp_agree *a) { memset(a, 0, sizeof *a); }

void lamp_agree_add(lamp_agree *a, const char *name, const char *fmt, ...) {
  if (a->n == LAMP_AGREE_MAX_FIELDS) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(a->values[a->n], LAMP_AGREE_TEXT, fmt, ap);
  va_end(ap);
  a->names[a->n++] = name;
}

const char *lamp_agree_number(double v, char *buf, size_t size) {
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(buf, size, "%.*g", digits, v);
    if (strtod(buf, NULL) == v) break;
  }
  return buf;
}

/* Two independent 24-bit digests (exact in f32) of every value, in order. */
static void fingerprints(const lamp_agree *a, float out[2]) {
  uint32_t h1 = 2166136261u, h2 = 5381u;
  for (size_t i = 0; i < a->n; i++)
    for (const unsigned char *s = (const unsigned char *)a->values[i];; s++) {
      h1 = (h1 ^ *s) * 16777619u; /* FNV-1a */
      h2 = h2 * 33u + *s;         /* djb2 */
      if (*s == '\0') break;
    }
  out[0] = (float)(h1 % 16777216u);
  out[1] = (float)(h2 % 16777216u);
}

/* every[world] blocks of the values, in rank order: all_gather, or one broadcast per rank. */
static lamp_status gather_values(const lamp_agree *a, lamp_comm *comm, char *every) {
  int world = lamp_comm_size(comm), rank = lamp_comm_rank(comm);
  const size_t block = sizeof a->values, words = block / sizeof(int32_t);
  if (lamp_comm_supports(comm, "all_gather"))
    return lamp_comm_all_gather(comm, a->values, every, words, LAMP_I32, LAMP_HOST);
  for (int r = 0; r < world; r++) {
    char *slot = every + (size_t)r * block;
    if (r == rank) memcpy(slot, a->values, block);
    lamp_status st = lamp_comm_broadcast(comm, slot, words, LAMP_I32, r, LAMP_HOST);
    if (st != LAMP_OK) return st;
  }
  return LAMP_OK;
}

static const char *value_of(const char *every, int rank, size_t field) {
  return every + (size_t)rank * sizeof(((lamp_agree *)0)->values) + field * LAMP_AGREE_TEXT;
}

/* "rank 0 has 64, rank 1 has 32" into out, shortened with "..." when the ranks are many. */
static void list_values(const char *every, int world, size_t field, char *out, size_t size) {
  size_t used = 0;
  out[0] = '\0';
  for (int r = 0; r < world; r++) {
    char item[LAMP_AGREE_TEXT + 32];
    snprintf(item, sizeof item, "%srank %d has %.*s", r ? ", " : "", r, LAMP_AGREE_TEXT - 1, value_of(every, r, field));
    if (used + strlen(item) + 4 >= size) {
      snprintf(out + used, size - used, ", ...");
      return;
    }
    used += (size_t)snprintf(out + used, size - used, "%s", item);
  }
}

static lamp_status report_disagreement(const lamp_agree *a, lamp_comm *comm, const char *who, const char *what,
                                       const char *advice) {
  int world = lamp_comm_size(comm);
  char *every = calloc((size_t)world, sizeof a->values);
  if (every == NULL) return lamp_error(LAMP_ERR_SYSTEM, "%s: out of memory comparing the ranks", who);
  lamp_status st = gather_values(a, comm, every);
  if (st != LAMP_OK) {
    free(every);
    return lamp_error_context(st, "%s: checking that every rank has %s", who, what);
  }
  for (size_t f = 0; f < a->n; f++)
    for (int r = 1; r < world; r++) {
      if (strncmp(value_of(every, 0, f), value_of(every, r, f), LAMP_AGREE_TEXT) == 0) continue;
      char list[1536];
      list_values(every, world, f, list, sizeof list);
      free(every);
      return lamp_error(LAMP_ERR_INVALID_USAGE, "%s: the ranks disagree on %s: %s; %s", who, a->names[f], list, advice);
    }
  free(every);
  /* The digests differed but the texts did not: only a communicator that garbles data does this. */
  return lamp_error(LAMP_ERR_REMOTE, "%s: the ranks' digests of %s differ but their values agree; the communicator corrupts data", who, what);
}

lamp_status lamp_agree_check(const lamp_agree *a, lamp_comm *comm, const char *who, const char *what,
                             const char *advice) {
  if (lamp_comm_size(comm) <= 1) return LAMP_OK;
  float mine[2];
  fingerprints(a, mine);
  /* One MAX over (v, -v) gives both the largest and the smallest value of every rank. */
  float both[4] = {mine[0], mine[1], -mine[0], -mine[1]};
  lamp_status st = lamp_comm_all_reduce(comm, both, 4, LAMP_F32, LAMP_REDUCE_MAX, LAMP_HOST);
  if (st != LAMP_OK) return lamp_error_context(st, "%s: checking that every rank has %s", who, what);
  if (both[0] == -both[2] && both[1] == -both[3]) return LAMP_OK;
  return report_disagreement(a, comm, who, what, advice);
}
