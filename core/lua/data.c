/* lamp.data: IDX and CIFAR-10 data sets, normalisation, loaders with augmentation. */
#include "data/cifar.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "lua/lua_util.h"

static const char *const idx_fields[] = {"classes", NULL};

/*
** lamp.data.idx(name_or_dir, split = "train", {classes = N}): the options table may also stand
** in the split's place. Without classes, "fashion-mnist" has its 10 and a directory's count is
** inferred from labels that are exactly 0..K-1.
*/
static int data_idx(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  if (lua_istable(L, 2)) {
    lua_settop(L, 2);
    lua_pushnil(L);
    lua_insert(L, 2); /* the options move to 3, the split to its default */
  }
  const char *split = luaL_optstring(L, 2, "train");
  lua_Integer classes = 0;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lampL_check_fields(L, 3, "data.idx", idx_fields);
    classes = lampL_optfield_range(L, 3, "data.idx", "classes", 0, 1, LAMP_IDX_MAX_CLASSES);
  }
  lamp_dataset *ds;
  lampL_check(L, lamp_dataset_idx_classes(&ds, name, split, (size_t)classes));
  lampL_pushbox(L, LAMP_DATASET_CLASS, ds, 0);
  return 1;
}

/* lamp.data.cifar10(dir, split = "train"): split "train" or "test". */
static int data_cifar10(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  const char *split = luaL_optstring(L, 2, "train");
  lamp_dataset *ds;
  lampL_check(L, lamp_dataset_cifar10(&ds, dir, split));
  lampL_pushbox(L, LAMP_DATASET_CLASS, ds, 0);
  return 1;
}

static int dataset_gc(lua_State *L) {
  lamp_dataset_release(lampL_takebox(L, 1, LAMP_DATASET_CLASS));
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
    return luaL_error(L, "Dataset:subset: %I samples from sample %I do not fit in samples 1 to %I", count, first, size);
  lamp_dataset *sub;
  lampL_check(L, lamp_dataset_subset(&sub, ds, (size_t)(first - 1), (size_t)count));
  lampL_pushbox(L, LAMP_DATASET_CLASS, sub, 0);
  return 1;
}

/*
** One side of a normalisation, mean or std, at idx: a number (every channel) or a list of one
** number per channel. Returns how many values the list holds (1 for a number, which *all
** marks) and writes up to LAMP_DATASET_MAX_CHANNELS of them into v.
*/
static int read_channels(lua_State *L, int idx, const char *field, int channels, float *v, int *all) {
  *all = 0;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    *all = 1;
    for (int c = 0; c < channels; c++) v[c] = (float)lua_tonumber(L, idx);
    return 1;
  }
  if (lua_type(L, idx) != LUA_TTABLE)
    return luaL_error(L, "Dataset:normalize: '%s' must be a number or a list of numbers, got %s", field,
                      luaL_typename(L, idx));
  lua_Integer n = luaL_len(L, idx);
  for (lua_Integer i = 1; i <= n && i <= LAMP_DATASET_MAX_CHANNELS; i++) {
    if (lua_geti(L, idx, i) != LUA_TNUMBER)
      return luaL_error(L, "Dataset:normalize: '%s'[%d] must be a number, got %s", field, (int)i, luaL_typename(L, -1));
    v[i - 1] = (float)lua_tonumber(L, -1);
    lua_pop(L, 1);
  }
  return n > LAMP_DATASET_MAX_CHANNELS ? LAMP_DATASET_MAX_CHANNELS + 1 : (int)n;
}

static const char *const normalize_fields[] = {"mean", "std", NULL};

/*
** ds:normalize(mean, std) or ds:normalize{mean = m, std = s}: each a number (every channel)
** or a list with one number per channel, e.g. {mean = {0.4914, 0.4822, 0.4465}, std = {...}}.
*/
static int dataset_normalize(lua_State *L) {
  lamp_dataset *ds = lampL_checkobject(L, 1, LAMP_DATASET_CLASS);
  if (lua_type(L, 2) == LUA_TTABLE && lua_isnoneornil(L, 3)) {
    lampL_check_fields(L, 2, "Dataset:normalize", normalize_fields);
    lua_settop(L, 2);
    lua_getfield(L, 2, "mean");
    lua_getfield(L, 2, "std");
    if (lua_isnil(L, 3) || lua_isnil(L, 4))
      return luaL_error(L, "Dataset:normalize: the table needs both 'mean' and 'std'");
    lua_remove(L, 2); /* now mean at 2 and std at 3, as in the positional form */
  }
  int channels = lamp_dataset_channels(ds);
  float mean[LAMP_DATASET_MAX_CHANNELS] = {0}, std[LAMP_DATASET_MAX_CHANNELS] = {0};
  int mean_all, std_all;
  int nm = read_channels(L, 2, "mean", channels, mean, &mean_all);
  int ns = read_channels(L, 3, "std", channels, std, &std_all);
  if (mean_all && std_all) {
    lampL_check(L, lamp_dataset_set_normalization(ds, mean[0], std[0]));
  } else {
    /* A list of the wrong length reaches the C check, which names both counts. */
    int given = !mean_all ? nm : ns;
    if (!mean_all && !std_all && nm != ns)
      return luaL_error(L, "Dataset:normalize: 'mean' has %d values but 'std' has %d", nm, ns);
    lampL_check(L, lamp_dataset_set_channel_normalization(ds, given, mean, std));
  }
  lua_settop(L, 1);
  return 1;
}

/* ds:normalization() -> {mean = {...}, std = {...}}, one value per channel. */
static int dataset_normalization(lua_State *L) {
  lamp_dataset *ds = lampL_checkobject(L, 1, LAMP_DATASET_CLASS);
  float mean[LAMP_DATASET_MAX_CHANNELS], std[LAMP_DATASET_MAX_CHANNELS];
  lamp_dataset_get_channel_normalization(ds, mean, std);
  int channels = lamp_dataset_channels(ds);
  lua_createtable(L, 0, 2);
  for (int side = 0; side < 2; side++) {
    lua_createtable(L, channels, 0);
    for (int c = 0; c < channels; c++) {
      lua_pushnumber(L, (lua_Number)(side == 0 ? mean[c] : std[c]));
      lua_rawseti(L, -2, c + 1);
    }
    lua_setfield(L, -2, side == 0 ? "mean" : "std");
  }
  return 1;
}

/* ds:shape() -> {channels, rows, cols}, e.g. {3, 32, 32}. */
static int dataset_shape(lua_State *L) {
  int64_t shape[3];
  int ndim = lamp_dataset_sample_shape(lampL_checkobject(L, 1, LAMP_DATASET_CLASS), shape);
  lua_createtable(L, ndim, 0);
  for (int i = 0; i < ndim; i++) {
    lua_pushinteger(L, (lua_Integer)shape[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static const char *const loader_fields[] = {"batch", "shuffle", "drop_last", "seed", "comm", "augment", NULL};
static const char *const augment_fields[] = {"crop_pad", "flip", NULL};

/* The loader's `augment` field: absent or {crop_pad = n, flip = true|false}. */
static void read_augment(lua_State *L, int opts, lamp_augment *a) {
  if (lua_getfield(L, opts, "augment") != LUA_TNIL) {
    if (!lua_istable(L, -1))
      luaL_error(L, "data.loader: 'augment' must be a table {crop_pad = n, flip = true}, got %s", luaL_typename(L, -1));
    int t = lua_gettop(L);
    lampL_check_fields(L, t, "data.loader augment", augment_fields);
    lua_Integer pad = lampL_optfield_integer(L, t, "data.loader augment", "crop_pad", 0);
    if (pad < 0 || pad > LAMP_AUGMENT_MAX_PAD)
      luaL_error(L, "data.loader: augment 'crop_pad' must be in [0, %d], got %I", LAMP_AUGMENT_MAX_PAD, pad);
    a->crop_pad = (int)pad;
    a->flip = lampL_optfield_boolean(L, t, "data.loader augment", "flip", 0);
  }
  lua_pop(L, 1);
}

/* lamp.data.loader(ds, {batch=, shuffle=, drop_last=, seed=, comm=, augment={crop_pad=, flip=}}) */
static int data_loader(lua_State *L) {
  lamp_dataset *ds = lampL_checkobject(L, 1, LAMP_DATASET_CLASS);
  if (lua_isnoneornil(L, 2)) lua_newtable(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  lampL_check_fields(L, 2, "data.loader", loader_fields);
  lamp_loader_config cfg = {0};
  lua_Integer batch = lampL_optfield_integer(L, 2, "data.loader", "batch", 128);
  if (batch <= 0) return luaL_error(L, "data.loader: 'batch' must be positive, got %I", batch);
  cfg.batch = (size_t)batch;
  cfg.shuffle = lampL_optfield_boolean(L, 2, "data.loader", "shuffle", 0);
  cfg.drop_last = lampL_optfield_boolean(L, 2, "data.loader", "drop_last", 0);
  cfg.seed = (uint64_t)lampL_optfield_range(L, 2, "data.loader", "seed", 0, 0, LUA_MAXINTEGER);
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
  read_augment(L, 2, &cfg.augment);
  lamp_loader *loader;
  lampL_check(L, lamp_loader_new(&loader, ds, &cfg));
  lampL_pushbox(L, LAMP_LOADER_CLASS, loader, 0);
  return 1;
}

static int loader_gc(lua_State *L) {
  lamp_loader_free(lampL_takebox(L, 1, LAMP_LOADER_CLASS));
  return 0;
}

static int loader_tostring(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_LOADER_CLASS);
  if (box->ptr == NULL) {
    lua_pushliteral(L, "lamp.Loader (closed)");
    return 1;
  }
  const lamp_loader_config *c = lamp_loader_get_config(box->ptr);
  lua_pushfstring(L, "lamp.Loader %s (batch %d, %d batches per epoch, rank %d of %d%s%s)",
                  lamp_dataset_name(lamp_loader_dataset(box->ptr)), (int)c->batch,
                  (int)lamp_loader_batches_per_epoch(box->ptr), c->rank, c->world,
                  c->augment.crop_pad > 0 ? ", random crop" : "", c->augment.flip ? ", random flip" : "");
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

/* loader:start(epoch = 0): starts a 0-based epoch for loader:next(). */
static int loader_start(lua_State *L) {
  lamp_loader *l = lampL_checkobject(L, 1, LAMP_LOADER_CLASS);
  lua_Integer epoch = luaL_optinteger(L, 2, 0);
  if (epoch < 0) return luaL_error(L, "Loader:start: epoch must be >= 0, got %I", epoch);
  lampL_check(L, lamp_loader_start_epoch(l, (uint64_t)epoch));
  return 0;
}

/* Pushes the n values of a tensor's data as a list. */
static void push_list_f32(lua_State *L, const float *v, size_t n) {
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_pushnumber(L, (lua_Number)v[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

/*
** loader:next() -> {x = {...}, y = {...}, shape = {b, c, h, w}} or nil at the end of the epoch.
** x is the batch flattened in NCHW order, y the 0-based labels: a window onto what the Trainer
** sees, for tests and inspection (a Trainer reads the loader directly, without this copy).
*/
static int loader_next(lua_State *L) {
  lamp_loader *l = lampL_checkobject(L, 1, LAMP_LOADER_CLASS);
  lamp_tensor *x, *y;
  int has;
  lampL_check(L, lamp_loader_next(l, &x, &y, &has));
  if (!has) {
    lua_pushnil(L);
    return 1;
  }
  lua_createtable(L, 0, 3);
  push_list_f32(L, lamp_tensor_data(x), lamp_tensor_numel(x));
  lua_setfield(L, -2, "x");
  const int32_t *yd = lamp_tensor_data(y);
  lua_createtable(L, (int)y->shape[0], 0);
  for (int64_t i = 0; i < y->shape[0]; i++) {
    lua_pushinteger(L, yd[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  lua_setfield(L, -2, "y");
  lua_createtable(L, x->ndim, 0);
  for (int i = 0; i < x->ndim; i++) {
    lua_pushinteger(L, (lua_Integer)x->shape[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "shape");
  return 1;
}

/* loader:position() -> epoch (0-based, the last started), next_batch (batches handed out). */
static int loader_position(lua_State *L) {
  uint64_t epoch;
  size_t next_batch;
  lampL_check(L, lamp_loader_position(lampL_checkobject(L, 1, LAMP_LOADER_CLASS), &epoch, &next_batch));
  lua_pushinteger(L, (lua_Integer)epoch);
  lua_pushinteger(L, (lua_Integer)next_batch);
  return 2;
}

/* loader:seek(epoch, next_batch): what position() returned, in a fresh loader. */
static int loader_seek(lua_State *L) {
  lamp_loader *l = lampL_checkobject(L, 1, LAMP_LOADER_CLASS);
  lua_Integer epoch = luaL_checkinteger(L, 2), next_batch = luaL_checkinteger(L, 3);
  if (epoch < 0 || next_batch < 0)
    return luaL_error(L, "Loader:seek: epoch and next_batch must be >= 0, got %I and %I", epoch, next_batch);
  lampL_check(L, lamp_loader_seek(l, (uint64_t)epoch, (size_t)next_batch));
  return 0;
}

static const luaL_Reg dataset_methods[] = {{"size", dataset_size},
                                           {"classes", dataset_classes},
                                           {"name", dataset_name},
                                           {"shape", dataset_shape},
                                           {"subset", dataset_subset},
                                           {"normalize", dataset_normalize},
                                           {"normalization", dataset_normalization},
                                           {"close", dataset_gc},
                                           {NULL, NULL}};
static const luaL_Reg loader_methods[] = {{"batches", loader_batches}, {"samples", loader_samples},
                                          {"start", loader_start},     {"next", loader_next},
                                          {"position", loader_position}, {"seek", loader_seek},
                                          {"close", loader_gc},        {NULL, NULL}};
static const luaL_Reg data_functions[] = {
    {"idx", data_idx}, {"cifar10", data_cifar10}, {"loader", data_loader}, {NULL, NULL}};

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
