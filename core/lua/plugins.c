/* lamp.precision, lamp.comm, lamp.optim and lamp.plugins: plugin objects from Lua. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "lua/lua_util.h"
#include "plugin/instance.h"
#include "plugin/loader.h"

#define MAX_OPTIONS 64

typedef lamp_status (*open_fn)(void **out, const char *name, const lamp_options *given);

/*
** The plugin is found before its options are read, so that they are judged against what it
** declares (an unknown name first, whatever its value). "auto" is resolved here once and the
** choice opened by its path, so the candidates are probed and logged once.
*/
static int open_plugin(lua_State *L, lamp_kind kind, const char *tname, open_fn open) {
  const char *name = luaL_checkstring(L, 1);
  const lamp_plugin_handle *h;
  int automatic = kind == LAMP_KIND_COMM && strcmp(name, "auto") == 0;
  lampL_check(L, automatic ? lamp_plugin_select_auto(kind, &h) : lamp_plugin_load(kind, name, &h));
  lamp_option nums[MAX_OPTIONS];
  lamp_text_option texts[MAX_OPTIONS];
  lamp_options given;
  lampL_options(L, 2, h->desc, &given, nums, texts, MAX_OPTIONS);
  void *obj;
  lampL_check(L, open(&obj, automatic ? h->path : name, &given));
  lampL_pushbox(L, tname, obj, 0);
  return 1;
}

static lamp_status open_precision(void **out, const char *name, const lamp_options *given) {
  return lamp_precision_open_options((lamp_precision **)out, name, given);
}
static lamp_status open_comm(void **out, const char *name, const lamp_options *given) {
  return lamp_comm_open_options((lamp_comm **)out, name, given);
}
static lamp_status open_optim(void **out, const char *name, const lamp_options *given) {
  return lamp_optim_open_options((lamp_optim **)out, name, given);
}

static int lamp_precision_new(lua_State *L) { return open_plugin(L, LAMP_KIND_PRECISION, LAMP_PRECISION_CLASS, open_precision); }
/* Opening a communicator tells the logger this process's rank: rank-0-only output starts here. */
static int lamp_comm_new(lua_State *L) {
  int n = open_plugin(L, LAMP_KIND_COMM, LAMP_COMM_CLASS, open_comm);
  lamp_log_set_rank(lamp_comm_rank(lampL_checkobject(L, -1, LAMP_COMM_CLASS)));
  return n;
}
static int lamp_optim_new(lua_State *L) { return open_plugin(L, LAMP_KIND_OPTIM, LAMP_OPTIM_CLASS, open_optim); }

static int precision_gc(lua_State *L) {
  lamp_precision_close(lampL_takebox(L, 1, LAMP_PRECISION_CLASS));
  return 0;
}
static int comm_gc(lua_State *L) {
  lamp_comm_close(lampL_takebox(L, 1, LAMP_COMM_CLASS));
  return 0;
}
static int optim_gc(lua_State *L) {
  lamp_optim_close(lampL_takebox(L, 1, LAMP_OPTIM_CLASS));
  return 0;
}

static int push_handle_string(lua_State *L, const char *tname, const lamp_plugin_handle *h) {
  lua_pushfstring(L, "%s %s %s (ABI %d.%d) from %s", tname, h->desc->name, h->desc->version,
                  (int)h->desc->abi_major, (int)h->desc->abi_minor, h->path);
  return 1;
}

static int precision_tostring(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_PRECISION_CLASS);
  if (box->ptr == NULL) return lua_pushliteral(L, "lamp.Precision (closed)"), 1;
  return push_handle_string(L, LAMP_PRECISION_CLASS, lamp_precision_handle(box->ptr));
}
static int comm_tostring(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_COMM_CLASS);
  if (box->ptr == NULL) return lua_pushliteral(L, "lamp.Comm (closed)"), 1;
  return push_handle_string(L, LAMP_COMM_CLASS, lamp_comm_handle(box->ptr));
}
static int optim_tostring(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_OPTIM_CLASS);
  if (box->ptr == NULL) return lua_pushliteral(L, "lamp.Optim (closed)"), 1;
  return push_handle_string(L, LAMP_OPTIM_CLASS, lamp_optim_handle(box->ptr));
}

static int precision_name(lua_State *L) {
  lua_pushstring(L, lamp_precision_handle(lampL_checkobject(L, 1, LAMP_PRECISION_CLASS))->desc->name);
  return 1;
}
static int comm_name(lua_State *L) {
  lua_pushstring(L, lamp_comm_handle(lampL_checkobject(L, 1, LAMP_COMM_CLASS))->desc->name);
  return 1;
}
static int optim_name(lua_State *L) {
  lua_pushstring(L, lamp_optim_handle(lampL_checkobject(L, 1, LAMP_OPTIM_CLASS))->desc->name);
  return 1;
}

static int comm_rank(lua_State *L) {
  lua_pushinteger(L, lamp_comm_rank(lampL_checkobject(L, 1, LAMP_COMM_CLASS)));
  return 1;
}
static int comm_size(lua_State *L) {
  lua_pushinteger(L, lamp_comm_size(lampL_checkobject(L, 1, LAMP_COMM_CLASS)));
  return 1;
}
static int comm_barrier(lua_State *L) {
  lampL_check(L, lamp_comm_barrier(lampL_checkobject(L, 1, LAMP_COMM_CLASS)));
  return 0;
}

/* optim:get("lr"): a hyper-parameter's value, a number or (a text option's) a string. */
static int optim_get(lua_State *L) {
  lamp_optim *o = lampL_checkobject(L, 1, LAMP_OPTIM_CLASS);
  const char *name = luaL_checkstring(L, 2);
  double v;
  const char *text = lamp_optim_text(o, name);
  if (text != NULL) {
    lua_pushstring(L, text);
    return 1;
  }
  if (lamp_optim_hparam(o, name, &v) != 0)
    return luaL_error(L, "%s: no hyper-parameter '%s'", lamp_optim_handle(o)->desc->name, name);
  lua_pushnumber(L, v);
  return 1;
}

/* precision:policy(): the dtypes as strings plus flags. */
static int precision_policy(lua_State *L) {
  lamp_precision *p = lampL_checkobject(L, 1, LAMP_PRECISION_CLASS);
  lamp_precision_policy pol = {.struct_size = sizeof pol};
  lampL_check(L, lamp_precision_policy_get(p, &pol));
  lua_createtable(L, 0, 8);
#define SET_DTYPE(field) \
  lua_pushstring(L, lamp_dtype_name((lamp_dtype)pol.field)); \
  lua_setfield(L, -2, #field)
  SET_DTYPE(weight_dtype);
  SET_DTYPE(compute_dtype);
  SET_DTYPE(activation_dtype);
  SET_DTYPE(grad_dtype);
  SET_DTYPE(accum_dtype);
#undef SET_DTYPE
  lua_pushboolean(L, (pol.flags & LAMP_POLICY_MASTER_WEIGHTS) != 0);
  lua_setfield(L, -2, "master_weights");
  lua_pushboolean(L, (pol.flags & LAMP_POLICY_LOSS_SCALING) != 0);
  lua_setfield(L, -2, "loss_scaling");
  lua_pushboolean(L, (pol.flags & LAMP_POLICY_STOCHASTIC_ROUNDING) != 0);
  lua_setfield(L, -2, "stochastic_rounding");
  return 1;
}

static void push_listing(lua_State *L, const lamp_plugin_listing *item) {
  lua_createtable(L, 0, 8);
  lua_pushstring(L, item->path);
  lua_setfield(L, -2, "path");
  lua_pushboolean(L, item->status == LAMP_OK);
  lua_setfield(L, -2, "ok");
  if (item->handle == NULL) {
    lua_pushstring(L, item->error);
    lua_setfield(L, -2, "error");
    return;
  }
  const lamp_plugin *d = item->handle->desc;
  lua_pushstring(L, d->name);
  lua_setfield(L, -2, "name");
  lua_pushstring(L, lamp_kind_name((lamp_kind)d->kind));
  lua_setfield(L, -2, "kind");
  lua_pushstring(L, d->version);
  lua_setfield(L, -2, "version");
  lua_pushfstring(L, "%d.%d", (int)d->abi_major, (int)d->abi_minor);
  lua_setfield(L, -2, "abi");
  lua_pushstring(L, d->description ? d->description : "");
  lua_setfield(L, -2, "description");
}

/* lamp.plugins(): every plugin file found, as a list of tables. */
static int lamp_plugins(lua_State *L) {
  lamp_plugin_listing *items;
  size_t n;
  lampL_check(L, lamp_plugin_list(&items, &n));
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    push_listing(L, &items[i]);
    lua_seti(L, -2, (lua_Integer)i + 1);
  }
  free(items);
  return 1;
}

static const luaL_Reg precision_methods[] = {
    {"name", precision_name}, {"policy", precision_policy}, {"close", precision_gc}, {NULL, NULL}};
static const luaL_Reg comm_methods[] = {{"name", comm_name}, {"rank", comm_rank},       {"size", comm_size},
                                        {"barrier", comm_barrier}, {"close", comm_gc}, {NULL, NULL}};
static const luaL_Reg optim_methods[] = {{"name", optim_name}, {"get", optim_get}, {"close", optim_gc}, {NULL, NULL}};

static const luaL_Reg plugin_functions[] = {{"precision", lamp_precision_new},
                                            {"comm", lamp_comm_new},
                                            {"optim", lamp_optim_new},
                                            {"plugins", lamp_plugins},
                                            {NULL, NULL}};

void lampL_open_plugins(lua_State *L) {
  lampL_newclass(L, LAMP_PRECISION_CLASS, precision_methods, precision_gc, precision_tostring);
  lampL_newclass(L, LAMP_COMM_CLASS, comm_methods, comm_gc, comm_tostring);
  lampL_newclass(L, LAMP_OPTIM_CLASS, optim_methods, optim_gc, optim_tostring);
  luaL_setfuncs(L, plugin_functions, 0);
}
