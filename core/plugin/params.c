/*
** Options against a plugin's declared parameters: defaults first, then each option by name,
** checked against its declaration: a number in its range, a text (ABI 1.4) of the right kind,
** an enum's value among its choices. Numbers and texts share one namespace. Plugins receive the
** numbers as a plain array in declaration order and read the texts through host->option_text.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "plugin/instance.h"

/* Declaration index of `name` among the numbers, or -1. */
static long find_param(const lamp_plugin *desc, const char *name) {
  for (uint32_t i = 0; i < desc->n_params; i++)
    if (strcmp(desc->params[i].name, name) == 0) return (long)i;
  return -1;
}

/* Declaration index of `name` among the texts, or -1. */
static long find_text(const lamp_text_param *t, uint32_t n, const char *name) {
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(t[i].name, name) == 0) return (long)i;
  return -1;
}

static void append(char *out, size_t size, size_t *used, const char *name) {
  if (*used >= size) return;
  int w = snprintf(out + *used, size - *used, "%s%s", *used > 0 ? ", " : "", name);
  if (w > 0) *used += (size_t)w;
}

/* "lr, momentum, sign": the numbers, then the texts (cut short when it does not fit). */
static void list_params(const lamp_plugin *desc, char *out, size_t size) {
  size_t used = 0;
  uint32_t n_text;
  const lamp_text_param *t = lamp_plugin_text_params(desc, &n_text);
  out[0] = '\0';
  for (uint32_t i = 0; i < desc->n_params; i++) append(out, size, &used, desc->params[i].name);
  for (uint32_t i = 0; i < n_text; i++) append(out, size, &used, t[i].name);
}

static lamp_status unknown_option(const lamp_plugin *desc, const char *name) {
  uint32_t n_text;
  (void)lamp_plugin_text_params(desc, &n_text);
  if (desc->n_params == 0 && n_text == 0)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: unknown option '%s'; this plugin takes no options",
                      desc->name, name);
  char valid[1024];
  list_params(desc, valid, sizeof valid);
  return lamp_error(LAMP_ERR_INVALID_ARG, "%s: unknown option '%s'; valid options: %s", desc->name,
                    name, valid);
}

/* The value as given: the shortest text that reads back as it (4294967297, 0.1, 1e+20, nan). */
static const char *value_text(double v, char *buf, size_t size) {
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(buf, size, "%.*g", digits, v);
    if (strtod(buf, NULL) == v) return buf;
  }
  return buf; /* NaN never compares equal: "nan" */
}

void lamp_text_param_expected(const lamp_text_param *p, char *out, size_t size) {
  if (p->choices == NULL) {
    snprintf(out, size, "a string");
    return;
  }
  char list[768];
  lamp_plugin_choices_text(p->choices, list, sizeof list);
  snprintf(out, size, "a string, one of: %s", list);
}

/* Every option name given so far, numbers and texts alike, is given once. */
static int given_before(const lamp_options *g, const char *name, size_t numbers, size_t texts) {
  for (size_t j = 0; j < numbers; j++)
    if (strcmp(g->numbers[j].name, name) == 0) return 1;
  for (size_t j = 0; j < texts; j++)
    if (strcmp(g->texts[j].name, name) == 0) return 1;
  return 0;
}

/* The i-th number: to a numeric parameter, in its range; never to a text one. */
static lamp_status apply_number(const lamp_plugin *desc, const lamp_options *g, size_t i, double *values) {
  const lamp_option *o = &g->numbers[i];
  char given[32];
  if (o->name == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: option %zu has no name", desc->name, i + 1);
  uint32_t n_text;
  const lamp_text_param *t = lamp_plugin_text_params(desc, &n_text);
  long k = find_param(desc, o->name);
  long kt = k < 0 ? find_text(t, n_text, o->name) : -1;
  if (k < 0 && kt < 0) return unknown_option(desc, o->name);
  if (given_before(g, o->name, i, 0))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: option '%s' given twice", desc->name, o->name);
  if (kt >= 0) {
    char expected[1024];
    lamp_text_param_expected(&t[kt], expected, sizeof expected);
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: option '%s' must be %s; got the number %s", desc->name, o->name,
                      expected, value_text(o->value, given, sizeof given));
  }
  const lamp_param *p = &desc->params[k];
  if (!(o->value >= p->min_value && o->value <= p->max_value)) /* NaN fails both */
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: option '%s' must be in [%g, %g], got %s",
                      desc->name, o->name, p->min_value, p->max_value, value_text(o->value, given, sizeof given));
  values[k] = o->value;
  return LAMP_OK;
}

/* The i-th text: to a text parameter, an enum's among its choices; never to a numeric one. */
static lamp_status apply_text(const lamp_plugin *desc, const lamp_options *g, size_t i, const char **texts) {
  const lamp_text_option *o = &g->texts[i];
  if (o->name == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: option %zu has no name", desc->name, g->n_numbers + i + 1);
  if (o->value == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: option '%s' has no value", desc->name, o->name);
  uint32_t n_text;
  const lamp_text_param *t = lamp_plugin_text_params(desc, &n_text);
  long k = find_text(t, n_text, o->name);
  long kn = k < 0 ? find_param(desc, o->name) : -1;
  if (k < 0 && kn < 0) return unknown_option(desc, o->name);
  if (given_before(g, o->name, g->n_numbers, i))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: option '%s' given twice", desc->name, o->name);
  if (kn >= 0) {
    const lamp_param *p = &desc->params[kn];
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: option '%s' must be a number in [%g, %g], got the string \"%s\"",
                      desc->name, o->name, p->min_value, p->max_value, o->value);
  }
  const lamp_text_param *p = &t[k];
  for (size_t c = 0; p->choices != NULL && p->choices[c] != NULL; c++)
    if (strcmp(p->choices[c], o->value) == 0) {
      if (texts != NULL) texts[k] = o->value;
      return LAMP_OK;
    }
  if (p->choices != NULL) {
    char list[768];
    lamp_plugin_choices_text(p->choices, list, sizeof list);
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: option '%s' must be one of: %s; got '%s'", desc->name, o->name,
                      list, o->value);
  }
  if (texts != NULL) texts[k] = o->value;
  return LAMP_OK;
}

lamp_status lamp_options_resolve(const lamp_plugin *desc, const lamp_options *given, double *values,
                                 const char **texts) {
  static const lamp_options none = {NULL, 0, NULL, 0};
  if (given == NULL) given = &none;
  if (desc == NULL || (given->n_numbers > 0 && given->numbers == NULL) ||
      (given->n_texts > 0 && given->texts == NULL) || (desc->n_params > 0 && values == NULL))
    return lamp_error(LAMP_ERR_INVALID_ARG, "lamp_options_resolve: NULL argument");
  uint32_t n_text;
  const lamp_text_param *t = lamp_plugin_text_params(desc, &n_text);
  for (uint32_t i = 0; i < desc->n_params; i++) values[i] = desc->params[i].default_value;
  for (uint32_t i = 0; texts != NULL && i < n_text; i++) texts[i] = t[i].default_value;
  for (size_t i = 0; i < given->n_numbers; i++) {
    lamp_status st = apply_number(desc, given, i, values);
    if (st != LAMP_OK) return st;
  }
  for (size_t i = 0; i < given->n_texts; i++) {
    lamp_status st = apply_text(desc, given, i, texts);
    if (st != LAMP_OK) return st;
  }
  return LAMP_OK;
}

lamp_status lamp_params_resolve(const lamp_plugin *desc, const lamp_option *opts, size_t n_opts,
                                double *values) {
  if (desc == NULL || (n_opts > 0 && opts == NULL) || (desc->n_params > 0 && values == NULL))
    return lamp_error(LAMP_ERR_INVALID_ARG, "lamp_params_resolve: NULL argument");
  const lamp_options given = {opts, n_opts, NULL, 0};
  return lamp_options_resolve(desc, &given, values, NULL);
}
