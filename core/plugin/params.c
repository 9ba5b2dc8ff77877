/*
** Options against a plugin's declared parameters: defaults first, then each option by name,
** range-checked. Plugins receive a plain array in declaration order.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "plugin/instance.h"

/* Declaration index of `name`, or -1. */
static long find_param(const lamp_plugin *desc, const char *name) {
  for (uint32_t i = 0; i < desc->n_params; i++)
    if (strcmp(desc->params[i].name, name) == 0) return (long)i;
  return -1;
}

/* "lr, momentum, dampening" (truncated when it does not fit). */
static void list_params(const lamp_plugin *desc, char *out, size_t size) {
  size_t used = 0;
  out[0] = '\0';
  for (uint32_t i = 0; i < desc->n_params && used < size; i++) {
    int w = snprintf(out + used, size - used, "%s%s", i > 0 ? ", " : "", desc->params[i].name);
    if (w < 0) return;
    used += (size_t)w;
  }
}

static lamp_status unknown_option(const lamp_plugin *desc, const char *name) {
  if (desc->n_params == 0)
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

static int given_before(const lamp_option *opts, size_t i) {
  for (size_t j = 0; j < i; j++)
    if (strcmp(opts[j].name, opts[i].name) == 0) return 1;
  return 0;
}

static lamp_status apply_option(const lamp_plugin *desc, const lamp_option *opts, size_t i,
                                double *values) {
  const lamp_option *o = &opts[i];
  if (o->name == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: option %zu has no name", desc->name, i + 1);
  long k = find_param(desc, o->name);
  if (k < 0) return unknown_option(desc, o->name);
  if (given_before(opts, i))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: option '%s' given twice", desc->name, o->name);
  const lamp_param *p = &desc->params[k];
  char given[32];
  if (!(o->value >= p->min_value && o->value <= p->max_value)) /* NaN fails both */
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: option '%s' must be in [%g, %g], got %s",
                      desc->name, o->name, p->min_value, p->max_value, value_text(o->value, given, sizeof given));
  values[k] = o->value;
  return LAMP_OK;
}

lamp_status lamp_params_resolve(const lamp_plugin *desc, const lamp_option *opts, size_t n_opts,
                                double *values) {
  if (desc == NULL || (n_opts > 0 && opts == NULL) || (desc->n_params > 0 && values == NULL))
    return lamp_error(LAMP_ERR_INVALID_ARG, "lamp_params_resolve: NULL argument");
  for (uint32_t i = 0; i < desc->n_params; i++) values[i] = desc->params[i].default_value;
  for (size_t i = 0; i < n_opts; i++) {
    lamp_status st = apply_option(desc, opts, i, values);
    if (st != LAMP_OK) return st;
  }
  return LAMP_OK;
}
