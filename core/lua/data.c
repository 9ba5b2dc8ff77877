/* lamp.data: IDX datasets and loaders. */
#include "data/dataset.h"
#include "data/loader.h"
#include "lua/lua_util.h"

static int data_idx(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  const char *split = luaL_optstring(L, 2, "train");
  lamp_dataset *ds;
  lampL_check(L, lamp_dataset_idx(&ds, name, split));
  lampL_pushbox(L, LAMP_DATASET_CLASS, ds, 0);
  return 1;
}

static int dataset_gc(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_DATASET_CLASS);
  lamp_dataset_release(box->ptr);
  box->ptr = NULL;
  return 0;
}

static int dataset_tostring(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_DATASET_CLASS);
  if (box->ptr == NULL) {
    lua_pushliteral(L, "lamp.Dataset (closed)");
    return 1;
  }
  lua_pushfstring(L, "lamp.Dataset %s (%d samples, %d classes)", lamp_dataset_name(box->ptr),
                  (int)lamp_dataset_size(box->ptr), (int)lamp_dataset_classes(box->ptr));
  return 1;
}

static int dataset_size(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)lamp_dataset_size(lampL_checkobject(L, 1, LAMP_DATASET_CLASS)));
  return 1;
}

static int dataset_classes(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)lamp_dataset_classes(lampL_checkobject(L, 1, LAMP_DATASET_CLASS)));
  return 1;
}

static int dataset_name(lua_State *L) {
  lua_pushstring(L, lamp_dataset_name(lampL_checkobject(L, 1, LAMP_DATASET_CLASS)));
  return 1;
}

/* ds:subset(first, count): samples first .. first+count-1, 1-based like Lua. */
static int dataset_subset(lua_State *L) {
  lamp_dataset *ds = lampL_checkobject(L, 1, LAMP_DATASET_CLASS);
  lua_Integer first = luaL_checkinteger(L, 2);
  lua_Integer count = luaL_checkinteger(L, 3);
  lua_Integer size = (lua_Integer)lamp_dataset_size(ds);
  if (first < 1 || count < 1 || first > size || count > size - first + 1)
    return luaL_error(L, "Dataset:subset: samples %d to %d are outside 1 to %d", (int)first,
                      (int)(first + count - 1), (int)size);
  lamp_dataset *sub;
  lampL_check(L, lamp_dataset_subset(&sub, ds, (size_t)(first - 1), (size_t)count));
  lampL_pushbox(L, LAMP_DATASET_CLASS, sub, 0);
  return 1;
}

static int dataset_normalize(lua_State *L) {
  lamp_dataset *ds = lampL_checkobject(L, 1, LAMP_DATASET_CLASS);
  lampL_check(L, lamp_dataset_set_normalization(ds, (float)luaL_checknumber(L, 2), (float)luaL_checknumber(L, 3)));
  lua_settop(L, 1);
  return 1;
}

static const char *const loader_fields[] = {"batch", "shuffle", "drop_last", "seed", "comm", NULL};

/* lamp.data.loader(ds, {batch=, shuffle=, drop_last=, seed=, comm=}) */
static int data_loader(lua_State *L) {
  lamp_dataset *ds = lampL_checkobject(L, 1, LAMP_DATASET_CLASS);
  if (lua_isnoneornil(L, 2)) lua_newtable(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  lampL_check_fields(L, 2, "data.loader", loader_fields);
  lamp_loader_config cfg = {0};
  lua_Integer batch = lampL_optfield_integer(L, 2, "data.loader", "batch", 128);
  if (batch <= 0) return luaL_error(L, "data.loader: 'batch' must be positive, got %d", (int)batch);
  cfg.batch = (size_t)batch;
  cfg.shuffle = lampL_optfield_boolean(L, 2, "data.loader", "shuffle", 0);
  cfg.drop_last = lampL_optfield_boolean(L, 2, "data.loader", "drop_last", 0);
  cfg.seed = (uint64_t)lampL_optfield_integer(L, 2, "data.loader", "seed", 0);
  cfg.rank = 0;
  cfg.world = 1;
  lua_getfield(L, 2, "comm");
  if (!lua_isnil(L, -1)) {
    lamp_comm *comm = lampL_testobject(L, -1, LAMP_COMM_CLASS);
    if (comm == NULL)
      return luaL_error(L, "data.loader: 'comm' must be an open lamp.Comm, got %s", luaL_typename(L, -1));
    cfg.rank = lamp_comm_rank(comm);
    cfg.world = lamp_comm_size(comm);
  }
  lua_pop(L, 1);
  lamp_loader *loader;
  lampL_check(L, lamp_loader_new(&loader, ds, &cfg));
  lampL_pushbox(L, LAMP_LOADER_CLASS, loader, 0);
  return 1;
}

static int loader_gc(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_LOADER_CLASS);
  lamp_loader_free(box->ptr);
  box->ptr = NULL;
  return 0;
}

static int loader_tostring(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_LOADER_CLASS);
  if (box->ptr == NULL) {
    lua_pushliteral(L, "lamp.Loader (closed)");
    return 1;
  }
  const lamp_loader_config *c = lamp_loader_get_config(box->ptr);
  lua_pushfstring(L, "lamp.Loader %s (batch %d, %d batches per epoch, rank %d of %d)",
                  lamp_dataset_name(lamp_loader_dataset(box->ptr)), (int)c->batch,
                  (int)lamp_loader_batches_per_epoch(box->ptr), c->rank, c->world);
  return 1;
}

static int loader_batches(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)lamp_loader_batches_per_epoch(lampL_checkobject(L, 1, LAMP_LOADER_CLASS)));
  return 1;
}

static int loader_samples(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)lamp_loader_samples_per_rank(lampL_checkobject(L, 1, LAMP_LOADER_CLASS)));
  return 1;
}

static const luaL_Reg dataset_methods[] = {{"size", dataset_size},         {"classes", dataset_classes},
                                           {"name", dataset_name},         {"subset", dataset_subset},
                                           {"normalize", dataset_normalize}, {"close", dataset_gc},
                                           {NULL, NULL}};
static const luaL_Reg loader_methods[] = {
    {"batches", loader_batches}, {"samples", loader_samples}, {"close", loader_gc}, {NULL, NULL}};
static const luaL_Reg data_functions[] = {{"idx", data_idx}, {"loader", data_loader}, {NULL, NULL}};

void lampL_open_data(lua_State *L) {
  lampL_newclass(L, LAMP_DATASET_CLASS, dataset_methods, dataset_gc, dataset_tostring);
  luaL_getmetatable(L, LAMP_DATASET_CLASS);
  lua_pushcfunction(L, dataset_size);
  lua_setfield(L, -2, "__len");
  lua_pop(L, 1);
  lampL_newclass(L, LAMP_LOADER_CLASS, loader_methods, loader_gc, loader_tostring);
  luaL_newlib(L, data_functions);
  lua_setfield(L, -2, "data");
}
