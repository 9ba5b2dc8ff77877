/*
** lamp.device() and lamp.devices(): which devices this process has, and which one the run trains
** on. A device is described by a plain table {name =, ordinal =, count =}; lamp.device() also
** makes it the run device (what a Trainer defaults to and what plugins are told).
*/
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "lua/lua_util.h"

/* {name =, ordinal =, count =} for a device this process can use. */
static void push_device(lua_State *L, lamp_device device) {
  lua_createtable(L, 0, 3);
  lua_pushstring(L, lamp_device_name(device));
  lua_setfield(L, -2, "name");
  lampL_setinteger(L, "ordinal", lamp_device_ordinal(device));
  lampL_setinteger(L, "count", lamp_device_count(device));
}

/* "cuda:1" -> cuda and 1; "sim" -> sim and -1 (none given). Raises the reason on failure. */
static void parse_spec(lua_State *L, const char *what, const char *spec, lamp_device *device, int *ordinal) {
  char name[32];
  const char *colon = strchr(spec, ':');
  size_t len = colon != NULL ? (size_t)(colon - spec) : strlen(spec);
  if (len >= sizeof name) {
    luaL_error(L, "%s: '%s' is not a device (expected cpu, cuda or cuda:N)", what, spec);
    return; /* not reached: luaL_error does not return */
  }
  memcpy(name, spec, len);
  name[len] = '\0';
  *ordinal = -1;
  if (colon != NULL) {
    char *end;
    long n = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || n < 0 || n > 1024)
      luaL_error(L, "%s: '%s' has no valid ordinal after ':' (expected e.g. cuda:0)", what, spec);
    *ordinal = (int)n;
  }
  lampL_check(L, lamp_device_parse(name, device));
  lampL_check(L, lamp_device_check(*device));
}

lamp_device lampL_check_device(lua_State *L, int idx, const char *what) {
  int ordinal;
  if (lua_type(L, idx) == LUA_TTABLE) {
    lua_getfield(L, idx, "name");
    lua_getfield(L, idx, "ordinal");
    const char *name = lua_tostring(L, -2);
    if (name == NULL) luaL_error(L, "%s: a device table needs its 'name' (use lamp.device())", what);
    lamp_device device;
    parse_spec(L, what, name, &device, &ordinal);
    ordinal = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : -1;
    lua_pop(L, 2);
    if (ordinal >= 0) lampL_check(L, lamp_device_select(device, ordinal));
    return device;
  }
  if (lua_type(L, idx) != LUA_TSTRING)
    luaL_error(L, "%s: a device is a name (\"cpu\", \"cuda:0\") or lamp.device(...), got %s", what,
               luaL_typename(L, idx));
  lamp_device device;
  parse_spec(L, what, lua_tostring(L, idx), &device, &ordinal);
  if (ordinal >= 0) lampL_check(L, lamp_device_select(device, ordinal));
  return device;
}

/* lamp.device(spec) -> the device, now the run device; raises why a device cannot be used. */
static int lamp_device_fn(lua_State *L) {
  lamp_device device = lampL_check_device(L, 1, "lamp.device");
  lampL_check(L, lamp_set_run_device(device));
  push_device(L, device);
  return 1;
}

/* lamp.devices() -> the devices this process can use, the CPU first. */
static int lamp_devices_fn(lua_State *L) {
  lua_newtable(L);
  lua_Integer n = 0;
  for (int d = 0; d < LAMP_DEVICE_SLOTS; d++) {
    if (lamp_device_check((lamp_device)d) != LAMP_OK || lamp_device_count((lamp_device)d) == 0) continue;
    push_device(L, (lamp_device)d);
    lua_seti(L, -2, ++n);
  }
  return 1;
}

void lampL_open_device(lua_State *L) {
  lua_pushcfunction(L, lamp_device_fn);
  lua_setfield(L, -2, "device");
  lua_pushcfunction(L, lamp_devices_fn);
  lua_setfield(L, -2, "devices");
}
