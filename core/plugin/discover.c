/*
** Discovery: walking every file the search path's templates match, for `auto` selection by
** probe and for `lamp plugins` listings. Loading goes through the loader's cache and checks.
*/
#include <glob.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "plugin/loader.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- walking the search locations ------------------------------------------------------------ */

/* Calls visit(path, expected kind, ud) for every file the search path's templates match:
   for kind K, or for every kind when kind is 0 (templates without '!' are walked once, any
   kind expected). */
typedef void (*visit_fn)(const char *path, lamp_kind expected, void *ud);

static void visit_template(const char *template_, lamp_kind kind, visit_fn visit, void *ud) {
  char pattern[PATH_MAX];
  if (!lamp_plugin_expand(template_, kind, "*", pattern, sizeof pattern)) return;
  glob_t g;
  if (glob(pattern, 0, NULL, &g) == 0) {
    lamp_kind expected = strchr(template_, '!') != NULL ? kind : 0;
    for (size_t i = 0; i < g.gl_pathc; i++) visit(g.gl_pathv[i], expected, ud);
  }
  globfree(&g);
}

static lamp_status walk(lamp_kind kind, visit_fn visit, void *ud) {
  static const lamp_kind kinds[] = {LAMP_KIND_PRECISION, LAMP_KIND_COMM, LAMP_KIND_OPTIM};
  char *search_path = lamp_plugin_search_path();
  if (search_path == NULL) return LAMP_ERR_SYSTEM;
  char template_[PATH_MAX];
  const char *cursor = search_path;
  while (lamp_plugin_next_template(&cursor, template_, sizeof template_)) {
    int per_kind = strchr(template_, '!') != NULL;
    for (size_t k = 0; k < COUNT(kinds); k++) {
      if (kind != 0 && kinds[k] != kind) continue;
      visit_template(template_, kinds[k], visit, ud);
      if (!per_kind) break;
    }
  }
  free(search_path);
  return LAMP_OK;
}

#define AUTO_MAX_SEEN 128

typedef struct auto_state {
  lamp_kind kind;
  char who[32];
  const lamp_plugin_handle *seen[AUTO_MAX_SEEN]; /* probed already (two templates, one file) */
  size_t n_seen;
  const lamp_plugin_handle *best;
  int best_score;
  char best_reason[256];
  char report[LAMP_ERROR_MAX]; /* one line per candidate, for the error when none fits */
} auto_state;

static void report_line(auto_state *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void report_line(auto_state *s, const char *fmt, ...) {
  size_t used = strlen(s->report);
  if (used + 4 >= sizeof s->report) return;
  memcpy(s->report + used, "\n  ", 4);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->report + used + 3, sizeof s->report - used - 3, fmt, ap);
  va_end(ap);
}

int lamp_plugin_probe(const lamp_plugin_handle *h, char *reason, size_t size) {
  reason[0] = '\0';
  lamp_host_load_message_clear();
  int score = h->desc->probe(lamp_host_get(), reason, size);
  reason[size - 1] = '\0';
  if (reason[0] == '\0') snprintf(reason, size, "%s", lamp_host_load_message());
  if (reason[0] == '\0') snprintf(reason, size, "no reason given");
  return score > 0 ? score : 0;
}

static int seen_before(auto_state *s, const lamp_plugin_handle *h) {
  for (size_t i = 0; i < s->n_seen; i++)
    if (s->seen[i] == h) return 1;
  if (s->n_seen < AUTO_MAX_SEEN) s->seen[s->n_seen++] = h;
  return 0;
}

static void consider(const char *path, lamp_kind expected, void *ud) {
  auto_state *s = ud;
  const lamp_plugin_handle *h = NULL;
  (void)expected; /* loaded as any kind: one of another kind is simply not a candidate */
  if (lamp_plugin_load_file(path, 0, &h) != LAMP_OK) {
    lamp_log(LAMP_LOG_INFO, s->who, "skipped: %s", lamp_last_error());
    report_line(s, "%s", lamp_last_error());
    return;
  }
  if (h->kind != s->kind || seen_before(s, h)) return;
  char reason[256];
  int score = lamp_plugin_probe(h, reason, sizeof reason);
  lamp_log(LAMP_LOG_INFO, s->who, "%s scored %d (%s)", h->desc->name, score, reason);
  report_line(s, "%s scored %d (%s): %s", h->desc->name, score, reason, h->path);
  if (score > s->best_score) {
    s->best = h;
    s->best_score = score;
    snprintf(s->best_reason, sizeof s->best_reason, "%s", reason);
  }
}

lamp_status lamp_plugin_select_auto(lamp_kind kind, const lamp_plugin_handle **out) {
  lamp_status st = lamp_plugin_check_request(kind, "auto", out);
  if (st != LAMP_OK) return st;
  auto_state *s = calloc(1, sizeof *s);
  if (s == NULL) return lamp_error(LAMP_ERR_SYSTEM, "out of memory selecting a plugin");
  s->kind = kind;
  snprintf(s->who, sizeof s->who, "%s auto", lamp_kind_name(kind));
  lamp_plugin_lock();
  st = walk(kind, consider, s);
  if (st == LAMP_OK && s->best == NULL)
    st = lamp_error(LAMP_ERR_UNSUPPORTED, "%s: no usable %s plugin%s%s", s->who,
                    lamp_kind_name(kind), s->report[0] ? "; candidates:" : " found", s->report);
  if (st == LAMP_OK) {
    lamp_log(LAMP_LOG_INFO, s->who, "picked %s (%s)", s->best->desc->name, s->best_reason);
    lamp_plugin_announce(s->best);
    *out = s->best;
  }
  lamp_plugin_unlock();
  free(s);
  return st;
}

typedef struct listing_state {
  lamp_plugin_listing *items;
  size_t n, cap;
  lamp_status status; /* LAMP_ERR_SYSTEM once out of memory */
} listing_state;

static int listed(const listing_state *s, const char *real) {
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->items[i].path, real) == 0) return 1;
  return 0;
}

static lamp_plugin_listing *next_item(listing_state *s) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 16;
    lamp_plugin_listing *grown = realloc(s->items, cap * sizeof *grown);
    if (grown == NULL) return NULL;
    s->items = grown;
    s->cap = cap;
  }
  lamp_plugin_listing *item = &s->items[s->n++];
  memset(item, 0, sizeof *item);
  return item;
}

static void list_one(const char *path, lamp_kind expected, void *ud) {
  listing_state *s = ud;
  char real[PATH_MAX];
  if (realpath(path, real) == NULL) snprintf(real, sizeof real, "%s", path);
  if (s->status != LAMP_OK || listed(s, real)) return;
  lamp_plugin_listing *item = next_item(s);
  if (item == NULL) {
    s->status = lamp_error(LAMP_ERR_SYSTEM, "out of memory listing plugins");
    return;
  }
  snprintf(item->path, sizeof item->path, "%s", real);
  item->status = lamp_plugin_load_file(path, expected, &item->handle);
  if (item->status != LAMP_OK) snprintf(item->error, sizeof item->error, "%s", lamp_last_error());
}

lamp_status lamp_plugin_list(lamp_plugin_listing **items, size_t *n) {
  if (items == NULL || n == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "plugin list: NULL output");
  listing_state s = {NULL, 0, 0, LAMP_OK};
  lamp_plugin_lock();
  lamp_status st = walk(0, list_one, &s);
  lamp_plugin_unlock();
  if (st == LAMP_OK) st = s.status;
  if (st != LAMP_OK) {
    free(s.items);
    return st;
  }
  *items = s.items;
  *n = s.n;
  return LAMP_OK;
}
