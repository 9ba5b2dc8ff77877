#include "lua/lua_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

/*
** A parameter whose range is [0, 1] and whose default is 0 or 1 is a flag (amsgrad, nesterov,
** dynamic, master_weights): it takes true/false as well as 0/1. Every other parameter wants a
** number, and a boolean there is refused rather than read as 0 or 1 (`lr = true` is a mistake).
*/
static int is_flag(const lamp_param *p) {
  return p->min_value == 0.0 && p->max_value == 1.0 && (p->default_value == 0.0 || p->default_value == 1.0);
}

static const lamp_param *find_param(const lamp_plugin *desc, const char *name) {
  for (uint32_t i = 0; i < desc->n_params; i++)
    if (strcmp(desc->params[i].name, name) == 0) return &desc->params[i];
  return NULL;
}

static const lamp_text_param *find_text(const lamp_plugin *desc, const char *name) {
  uint32_t n;
  const lamp_text_param *t = lamp_plugin_text_params(desc, &n);
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(t[i].name, name) == 0) return &t[i];
  return NULL;
}

/* Raises the resolver's own "unknown option" message, so Lua and C users read the same words. */
static void unknown_option(lua_State *L, const lamp_plugin *desc, const char *name) {
  double *scratch = lua_newuserdatauv(L, (desc->n_params ? desc->n_params : 1) * sizeof *scratch, 0);
  const lamp_option opt = {name, 0.0};
  if (lamp_params_resolve(desc, &opt, 1, scratch) != LAMP_OK) lampL_error(L);
  luaL_error(L, "%s: option '%s' is not known", desc->name, name); /* not reached: the name is unknown */
}

/* The value at the top of the stack as an option of parameter p; raises what it should be. */
static double option_value(lua_State *L, const lamp_plugin *desc, const lamp_param *p) {
  int type = lua_type(L, -1);
  if (type == LUA_TNUMBER) return lua_tonumber(L, -1);
  if (type == LUA_TBOOLEAN && is_flag(p)) return lua_toboolean(L, -1) ? 1.0 : 0.0;
  char lo[32], hi[32];
  snprintf(lo, sizeof lo, "%g", p->min_value);
  snprintf(hi, sizeof hi, "%g", p->max_value);
  if (is_flag(p))
    luaL_error(L, "%s: option '%s' must be true, false, 0 or 1, got %s", desc->name, p->name, lampL_value_text(L, -1));
  luaL_error(L, "%s: option '%s' must be a number in [%s, %s], got %s", desc->name, p->name, lo, hi,
             lampL_value_text(L, -1));
  return 0.0;
}

/* A text option takes a string; a number goes on to the resolver, which refuses it in the words C
   callers read too; anything else is refused here in those words. */
static void check_text_value(lua_State *L, const lamp_plugin *desc, const lamp_text_param *p) {
  int type = lua_type(L, -1);
  if (type == LUA_TSTRING || type == LUA_TNUMBER) return;
  char expected[1024];
  lamp_text_param_expected(p, expected, sizeof expected);
  luaL_error(L, "%s: option '%s' must be %s; got %s", desc->name, p->name, expected, lampL_value_text(L, -1));
}

static void add_number(lua_State *L, const lamp_plugin *desc, lamp_options *out, lamp_option *nums, size_t max,
                       const char *name, double value) {
  if (out->n_numbers == max) luaL_error(L, "%s: more than %d options", desc->name, (int)max);
  nums[out->n_numbers].name = name;
  nums[out->n_numbers].value = value;
  out->n_numbers++;
}

void lampL_options(lua_State *L, int idx, const lamp_plugin *desc, lamp_options *out, lamp_option *nums,
                   lamp_text_option *texts, size_t max) {
  *out = (lamp_options){nums, 0, texts, 0};
  if (lua_isnoneornil(L, idx)) return;
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx))
    luaL_error(L, "%s: options must be a table {name = value, ...}, got %s", desc->name, luaL_typename(L, idx));
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, "%s: option names must be strings, got %s", desc->name, lampL_value_text(L, -2));
    const char *name = lua_tostring(L, -2);
    const lamp_param *p = find_param(desc, name);
    const lamp_text_param *tp = p == NULL ? find_text(desc, name) : NULL;
    if (p == NULL && tp == NULL) unknown_option(L, desc, name); /* before the type: `betas = {...}` is unknown, not mistyped */
    if (p != NULL) {
      add_number(L, desc, out, nums, max, name, option_value(L, desc, p));
    } else {
      check_text_value(L, desc, tp);
      if (lua_type(L, -1) == LUA_TNUMBER) {
        add_number(L, desc, out, nums, max, name, lua_tonumber(L, -1));
      } else {
        if (out->n_texts == max) luaL_error(L, "%s: more than %d options", desc->name, (int)max);
        texts[out->n_texts].name = name;
        texts[out->n_texts].value = lua_tostring(L, -1); /* a string: lua_tostring does not convert it */
        out->n_texts++;
      }
    }
    lua_pop(L, 1);
  }
}

const char *lampL_number_text(lua_Number v, char *buf, size_t size) {
  /* An integral float (2^32 + 1 is one in Lua) reads best without a fraction or an exponent. */
  if (v == floor(v) && fabs(v) < 1e17) {
    snprintf(buf, size, "%.0f", v);
    return buf;
  }
  for (int digits = 1; digits <= 17; digits++) { /* the shortest text that reads back as v */
    snprintf(buf, size, "%.*g", digits, v);
    if (strtod(buf, NULL) == v) return buf;
  }
  return buf; /* NaN and the infinities: nan, inf, -inf */
}

const char *lampL_value_text(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  char buf[64];
  switch (lua_type(L, idx)) {
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) return lua_pushfstring(L, "%I", (LUAI_UACINT)lua_tointeger(L, idx));
    return lua_pushstring(L, lampL_number_text(lua_tonumber(L, idx), buf, sizeof buf));
  case LUA_TBOOLEAN: return lua_pushstring(L, lua_toboolean(L, idx) ? "true" : "false");
  case LUA_TSTRING: return lua_pushfstring(L, "the string \"%s\"", lua_tostring(L, idx));
  default: return lua_pushstring(L, luaL_typename(L, idx));
  }
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

/* Whether the number at idx is a whole number within [min, max], decided on the number as
   given, before any conversion could wrap it. */
static int integer_in(lua_State *L, int idx, lua_Integer min, lua_Integer max, lua_Integer *out) {
  if (lua_type(L, idx) != LUA_TNUMBER) return 0;
  if (lua_isinteger(L, idx)) {
    lua_Integer v = lua_tointeger(L, idx);
    *out = v;
    return v >= min && v <= max;
  }
  lua_Number v = lua_tonumber(L, idx);
  /* Both bounds as floats: min and max are at most 2^63 in magnitude, which a double holds
     exactly except for 2^63 - 1, which rounds up to 2^63; "< 2^63" below keeps that edge out. */
  if (!(v == floor(v)) || !(v >= (lua_Number)min) || !(v <= (lua_Number)max) || !(v < 9223372036854775808.0)) return 0;
  *out = (lua_Integer)v;
  return *out >= min && *out <= max;
}

lua_Integer lampL_optfield_integer(lua_State *L, int idx, const char *what, const char *field, lua_Integer def) {
  int type = push_field(L, idx, field);
  lua_Integer v = def;
  if (type != LUA_TNIL && !integer_in(L, -1, LUA_MININTEGER, LUA_MAXINTEGER, &v))
    luaL_error(L, "%s: '%s' must be an integer, got %s", what, field, lampL_value_text(L, -1));
  lua_pop(L, 1);
  return v;
}

lua_Integer lampL_optfield_range(lua_State *L, int idx, const char *what, const char *field, lua_Integer def,
                                 lua_Integer min, lua_Integer max) {
  int type = push_field(L, idx, field);
  lua_Integer v = def;
  if (type != LUA_TNIL && !integer_in(L, -1, min, max, &v))
    luaL_error(L, "%s: '%s' must be an integer in [%I, %I], got %s", what, field, (LUAI_UACINT)min, (LUAI_UACINT)max,
               lampL_value_text(L, -1));
  lua_pop(L, 1);
  return v;
}

lua_Number lampL_optfield_number(lua_State *L, int idx, const char *what, const char *field, lua_Number def) {
  int type = push_field(L, idx, field);
  lua_Number v = def;
  if (type != LUA_TNIL) {
    if (type != LUA_TNUMBER) luaL_error(L, "%s: '%s' must be a number, got %s", what, field, lampL_value_text(L, -1));
    v = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

int lampL_optfield_boolean(lua_State *L, int idx, const char *what, const char *field, int def) {
  int type = push_field(L, idx, field);
  int v = def;
  if (type != LUA_TNIL) {
    if (type != LUA_TBOOLEAN) luaL_error(L, "%s: '%s' must be a boolean, got %s", what, field, lampL_value_text(L, -1));
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
