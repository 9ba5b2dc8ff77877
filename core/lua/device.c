/*
** lamp.device() and lamp.devices(): which devices this process has, and which one the run trains
** on. A device is described by a plain table {name =, ordinal =, count =, device_name =, memory =,
** compute_capability =, gemm =}; lamp.device() also makes it the run device (what a Trainer defaults to and
** what plugins are told). Asking for cuda loads its backend module: a device that cannot be used
** raises the reason (module not built, a library missing, no driver, no device).
*/
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "lua/lua_util.h"

/* The table for device `ordinal` of a kind this process can use; raises when it cannot be
   described. compute_capability ("9.0") and gemm ("openblas; bf16: dnnl") only where the device
   has them. */
static void push_device(lua_State *L, lamp_device device, int ordinal) {
  lamp_device_info info;
  lampL_check(L, lamp_device_describe(device, ordinal, &info));
  lua_createtable(L, 0, 7);
  lua_pushstring(L, lamp_device_name(device));
  lua_setfield(L, -2, "name");
  lampL_setinteger(L, "ordinal", ordinal);
  lampL_setinteger(L, "count", lamp_device_count(device));
  lua_pushstring(L, info.name);
  lua_setfield(L, -2, "device_name");
  lampL_setinteger(L, "memory", (lua_Integer)info.memory);
  if (info.cc_major > 0) {
    lua_pushfstring(L, "%d.%d", info.cc_major, info.cc_minor);
    lua_setfield(L, -2, "compute_capability");
  }
  if (info.gemm[0] != '\0') {
    lua_pushstring(L, info.gemm);
    lua_setfield(L, -2, "gemm");
  }
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
  push_device(L, device, lamp_device_ordinal(device));
  return 1;
}

/* lamp.devices() -> one table per device this process can use (each ordinal), the CPU first.
   Kinds that cannot be used are left out; lamp.device(name) says why. */
static int lamp_devices_fn(lua_State *L) {
  lua_newtable(L);
  lua_Integer n = 0;
  for (int d = 0; d < LAMP_DEVICE_SLOTS; d++) {
    if (d >= LAMP_DEVICE_COUNT && !lamp_device_has_memory((lamp_device)d)) continue; /* an empty slot */
    if (lamp_device_check((lamp_device)d) != LAMP_OK) continue;
    int count = lamp_device_count((lamp_device)d);
    for (int i = 0; i < count; i++) {
      push_device(L, (lamp_device)d, i);
      lua_seti(L, -2, ++n);
    }
  }
  return 1;
}

void lampL_open_device(lua_State *L) {
  lua_pushcfunction(L, lamp_device_fn);
  lua_setfield(L, -2, "device");
  lua_pushcfunction(L, lamp_devices_fn);
  lua_setfield(L, -2, "devices");
}
