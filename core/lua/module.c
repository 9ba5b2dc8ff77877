/*
** The `lamp` Lua module: require "lamp" returns a table with nn, data, lr, Trainer, the
** plugin constructors, memory() and parse_args().
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "lua/checkpoint.h"
#include "lua/lua_util.h"
#include "lua/module.h"
#include "tensor/ledger.h"

/* Pushes {params = {current=, peak=}, ..., total = {...}}, in bytes, for one device. */
static void push_ledger(lua_State *L, lamp_device device) {
  lua_createtable(L, 0, LAMP_MEM_TAG_COUNT + 1);
  for (int tag = 0; tag <= LAMP_MEM_TAG_COUNT; tag++) {
    lamp_ledger_entry e = lamp_ledger_get(device, (lamp_mem_tag)tag);
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, (lua_Integer)e.current);
    lua_setfield(L, -2, "current");
    lua_pushinteger(L, (lua_Integer)e.peak);
    lua_setfield(L, -2, "peak");
    lua_setfield(L, -2, lamp_mem_tag_name((lamp_mem_tag)tag));
  }
}

/*
** lamp.memory() -> the host's ledger (params, ..., total), plus one such table per other device
** with memory, under its name: mem.params.peak is the host's, mem.sim.params.peak the simulated
** device's.
*/
static int lamp_memory(lua_State *L) {
  push_ledger(L, LAMP_HOST);
  for (int d = 0; d < LAMP_DEVICE_SLOTS; d++) {
    if (d == LAMP_HOST || !lamp_device_has_memory((lamp_device)d)) continue;
    push_ledger(L, (lamp_device)d);
    lua_setfield(L, -2, lamp_device_name((lamp_device)d));
  }
  return 1;
}

/* The arguments joined with tabs, as print() joins them. */
static const char *joined_arguments(lua_State *L) {
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 1; i <= n; i++) {
    if (i > 1) luaL_addchar(&b, '\t');
    luaL_tolstring(L, i, NULL);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  return lua_tostring(L, -1);
}

/* lamp.log0(...): like print, on rank 0 only (the rank of the last communicator opened). */
static int lamp_log0(lua_State *L) {
  if (lamp_log_get_rank() != 0) return 0;
  const char *line = joined_arguments(L);
  fprintf(stdout, "%s\n", line);
  fflush(stdout);
  return 0;
}

/* lamp.log(...): like print on every rank, prefixed with "[rank R] ". */
static int lamp_log_line(lua_State *L) {
  const char *line = joined_arguments(L);
  fprintf(stdout, "[rank %d] %s\n", lamp_log_get_rank(), line);
  fflush(stdout);
  return 0;
}

/* lamp.reset_memory_peaks(): every peak becomes the current value (start of a measurement). */
static int lamp_reset_memory_peaks(lua_State *L) {
  (void)L;
  lamp_ledger_reset_peaks();
  return 0;
}

static void push_argument_value(lua_State *L, const char *value) {
  if (strcmp(value, "true") == 0) lua_pushboolean(L, 1);
  else if (strcmp(value, "false") == 0) lua_pushboolean(L, 0);
  else {
    lua_pushstring(L, value);
    if (lua_stringtonumber(L, value) != 0) lua_remove(L, -2); /* the number replaces the string */
  }
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void check_known(lua_State *L, int defaults, const char *key) {
  if (defaults == 0) return;
  int known = lua_getfield(L, defaults, key) != LUA_TNIL;
  lua_pop(L, 1);
  if (known) return;
  /* Sorted, so the message is the same every run whatever the table's internal order. */
  const char *names[128];
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, defaults) != 0) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING && n < sizeof names / sizeof names[0]) names[n++] = lua_tostring(L, -1);
  }
  qsort(names, n, sizeof names[0], compare_names);
  char valid[2048] = "";
  size_t used = 0;
  for (size_t i = 0; i < n && used < sizeof valid; i++)
    used += (size_t)snprintf(valid + used, sizeof valid - used, "%s--%s", i ? ", " : "", names[i]);
  luaL_error(L, "unknown argument --%s; valid arguments: %s", key, valid);
}

/*
** lamp.parse_args(arg [, defaults]): "--key=value" pairs become fields (numbers and
** true/false converted), "--flag" becomes true, other arguments are kept in order at 1..n.
** With defaults, unknown keys are an error and missing ones take the default.
*/
static int lamp_parse_args(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int defaults = lua_istable(L, 2) ? 2 : 0;
  lua_newtable(L);
  int result = lua_gettop(L);
  if (defaults) {
    lua_pushnil(L);
    while (lua_next(L, defaults) != 0) {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_settable(L, result);
    }
  }
  lua_Integer positional = 0;
  lua_Integer n = luaL_len(L, 1);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, 1, i);
    const char *a = lua_tostring(L, -1);
    if (a == NULL || strncmp(a, "--", 2) != 0 || a[2] == '\0') {
      lua_seti(L, result, ++positional);
      continue;
    }
    const char *eq = strchr(a + 2, '=');
    lua_pushlstring(L, a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
    const char *key = lua_tostring(L, -1);
    check_known(L, defaults, key);
    if (eq) push_argument_value(L, eq + 1);
    else lua_pushboolean(L, 1);
    lua_settable(L, result);
    lua_pop(L, 1);
  }
  return 1;
}

static const luaL_Reg lamp_functions[] = {{"memory", lamp_memory},
                                          {"reset_memory_peaks", lamp_reset_memory_peaks},
                                          {"log0", lamp_log0},
                                          {"log", lamp_log_line},
                                          {"parse_args", lamp_parse_args}, {NULL, NULL}};

int luaopen_lamp(lua_State *L) {
  luaL_newlib(L, lamp_functions);
  lua_pushliteral(L, LAMP_VERSION);
  lua_setfield(L, -2, "version");
  lampL_open_nn(L);
  lampL_open_data(L);
  lampL_open_plugins(L);
  lampL_open_trainer(L);
  lampL_open_schedule(L);
  lampL_open_checkpoint(L);
  lampL_open_device(L);
  return 1;
}
