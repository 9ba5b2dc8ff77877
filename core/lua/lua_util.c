#include "lua/lua_util.h"

#include <string.h>

#include "base/error.h"

int lampL_error(lua_State *L) {
  const char *msg = lamp_last_error();
  return luaL_error(L, "%s", msg[0] ? msg : "unknown error");
}

void lampL_newclass(lua_State *L, const char *tname, const luaL_Reg *methods, lua_CFunction gc,
                    lua_CFunction tostring) {
  luaL_newmetatable(L, tname);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, gc);
  lua_setfield(L, -2, "__close");
  if (tostring != NULL) {
    lua_pushcfunction(L, tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
}

lampL_box *lampL_pushbox(lua_State *L, const char *tname, void *ptr, int nuv) {
  lampL_box *box = lua_newuserdatauv(L, sizeof *box, nuv);
  box->ptr = ptr;
  box->pins = 0;
  luaL_setmetatable(L, tname);
  return box;
}

void *lampL_takebox(lua_State *L, int idx, const char *tname) {
  lampL_box *box = luaL_checkudata(L, idx, tname);
  if (box->pins > 0) luaL_error(L, "cannot close this %s: a lamp.Trainer still uses it", tname);
  void *ptr = box->ptr;
  box->ptr = NULL;
  return ptr;
}

void *lampL_checkobject(lua_State *L, int idx, const char *tname) {
  lampL_box *box = luaL_checkudata(L, idx, tname);
  if (box->ptr == NULL) luaL_error(L, "attempt to use a closed %s", tname);
  return box->ptr;
}

void *lampL_testobject(lua_State *L, int idx, const char *tname) {
  lampL_box *box = luaL_testudata(L, idx, tname);
  return box != NULL ? box->ptr : NULL;
}

size_t lampL_options(lua_State *L, int idx, const char *what, lamp_option *opts, size_t max) {
  size_t n = 0;
  if (lua_isnoneornil(L, idx)) return 0;
  idx = lua_absindex(L, idx);
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "%s: option names must be strings", what);
    const char *name = lua_tostring(L, -2);
    double value = 0.0;
    if (lua_type(L, -1) == LUA_TBOOLEAN)
      value = lua_toboolean(L, -1) ? 1.0 : 0.0;
    else if (lua_type(L, -1) == LUA_TNUMBER)
      value = lua_tonumber(L, -1);
    else
      luaL_error(L, "%s: option '%s' must be a number or a boolean, got %s", what, name, luaL_typename(L, -1));
    if (n == max) luaL_error(L, "%s: more than %d options", what, (int)max);
    opts[n].name = name;
    opts[n].value = value;
    n++;
    lua_pop(L, 1);
  }
  return n;
}

static int is_valid_field(const char *key, const char *const *valid) {
  for (size_t i = 0; valid[i] != NULL; i++)
    if (strcmp(key, valid[i]) == 0) return 1;
  return 0;
}

void lampL_check_fields(lua_State *L, int idx, const char *what, const char *const *valid) {
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) continue;
    const char *key = lua_tostring(L, -1);
    if (is_valid_field(key, valid)) continue;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; valid[i] != NULL; i++) {
      if (i) luaL_addstring(&b, ", ");
      luaL_addstring(&b, valid[i]);
    }
    luaL_pushresult(&b);
    luaL_error(L, "%s: unknown field '%s'; valid fields: %s", what, key, lua_tostring(L, -1));
  }
}

static int push_field(lua_State *L, int idx, const char *field) {
  return lua_getfield(L, idx, field);
}

lua_Integer lampL_optfield_integer(lua_State *L, int idx, const char *what, const char *field, lua_Integer def) {
  int type = push_field(L, idx, field);
  lua_Integer v = def;
  if (type != LUA_TNIL) {
    int ok;
    v = lua_tointegerx(L, -1, &ok);
    if (!ok) luaL_error(L, "%s: '%s' must be an integer, got %s", what, field, luaL_typename(L, -1));
  }
  lua_pop(L, 1);
  return v;
}

lua_Number lampL_optfield_number(lua_State *L, int idx, const char *what, const char *field, lua_Number def) {
  int type = push_field(L, idx, field);
  lua_Number v = def;
  if (type != LUA_TNIL) {
    if (type != LUA_TNUMBER) luaL_error(L, "%s: '%s' must be a number, got %s", what, field, luaL_typename(L, -1));
    v = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

int lampL_optfield_boolean(lua_State *L, int idx, const char *what, const char *field, int def) {
  int type = push_field(L, idx, field);
  int v = def;
  if (type != LUA_TNIL) {
    if (type != LUA_TBOOLEAN) luaL_error(L, "%s: '%s' must be a boolean, got %s", what, field, luaL_typename(L, -1));
    v = lua_toboolean(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

void lampL_setinteger(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

void lampL_setnumber(lua_State *L, const char *k, lua_Number v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}
