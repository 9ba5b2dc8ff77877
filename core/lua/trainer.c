/* lamp.Trainer and lamp.lr: the training loop from Lua. */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "lua/lua_util.h"
#include "tensor/dtype.h"
#include "train/trainer.h"

/* User values of a Trainer box: the objects it borrows, kept alive and pinned. */
enum { UV_PRECISION = 1, UV_COMM, UV_OPTIM, UV_COUNT = UV_OPTIM };

static const char *const trainer_fields[] = {"model", "loss",     "precision", "comm",         "optim",     "accum",
                                             "clip",  "schedule", "seed",      "param_groups", "bucket_mb", "compress",
                                             "device", "max_skipped", "graphs", "metrics", "shard_optimizer", NULL};
static const char *const group_fields[] = {"match", "lr_mult", "decay", NULL};

static void *required_object(lua_State *L, const char *field, const char *tname, const char *hint) {
  lua_getfield(L, 1, field);
  if (lua_isnil(L, -1)) luaL_error(L, "Trainer: '%s' is required (%s)", field, hint);
  void *obj = lampL_testobject(L, -1, tname);
  if (obj == NULL) {
    if (luaL_testudata(L, -1, tname) != NULL) luaL_error(L, "Trainer: '%s' is closed", field);
    luaL_error(L, "Trainer: '%s' must be a %s, got %s", field, tname, luaL_typename(L, -1));
  }
  lua_pop(L, 1);
  return obj;
}

/* schedule = "constant" | lamp.lr.cosine{...} | lamp.lr.warmup_cosine{...} | lamp.lr.step{...} */
static lamp_schedule read_schedule(lua_State *L) {
  lamp_schedule s = {.kind = LAMP_SCHEDULE_CONSTANT};
  if (lua_getfield(L, 1, "schedule") != LUA_TNIL) s = lampL_check_schedule(L, -1, "Trainer");
  lua_pop(L, 1);
  return s;
}

static void pin(lua_State *L, int delta, int uv_index, const char *tname, int trainer_idx) {
  lua_getiuservalue(L, trainer_idx, uv_index);
  lampL_box *box = luaL_testudata(L, -1, tname);
  if (box != NULL) box->pins += delta;
  lua_pop(L, 1);
}

static void keep_borrowed(lua_State *L, int trainer_idx) {
  static const char *const fields[UV_COUNT] = {"precision", "comm", "optim"};
  static const char *const classes[UV_COUNT] = {LAMP_PRECISION_CLASS, LAMP_COMM_CLASS, LAMP_OPTIM_CLASS};
  for (int i = 0; i < UV_COUNT; i++) {
    lua_getfield(L, 1, fields[i]);
    lua_setiuservalue(L, trainer_idx, i + 1);
    pin(L, +1, i + 1, classes[i], trainer_idx);
  }
}

/* Whether the Lua pattern at the top of the stack matches name (string.find semantics). */
static int pattern_matches(lua_State *L, int find, const char *name, int pattern) {
  lua_pushvalue(L, find);
  lua_pushstring(L, name);
  lua_pushvalue(L, pattern);
  lua_call(L, 2, 1);
  int hit = !lua_isnil(L, -1);
  lua_pop(L, 1);
  return hit;
}

/* Applies group g (a table at the top of the stack) to every parameter its pattern matches. */
static void apply_group(lua_State *L, lamp_trainer *t, int find, int g) {
  int group = lua_gettop(L);
  char what[64];
  snprintf(what, sizeof what, "Trainer: param_groups[%d]", g);
  lampL_check_fields(L, group, what, group_fields);
  if (lua_getfield(L, group, "match") != LUA_TSTRING)
    luaL_error(L, "%s: 'match' must be a Lua pattern string, got %s", what, luaL_typename(L, -1));
  int pattern = lua_gettop(L);
  int has_lr = lua_getfield(L, group, "lr_mult") != LUA_TNIL, has_decay = lua_getfield(L, group, "decay") != LUA_TNIL;
  lua_pop(L, 2);
  lamp_model *m = lamp_trainer_model(t);
  size_t hits = 0;
  for (size_t i = 0; i < lamp_model_n_params(m); i++) {
    const char *name = lamp_model_param_at(m, i)->name;
    if (!pattern_matches(L, find, name, pattern)) continue;
    double lr_mult;
    int decay;
    lampL_check(L, lamp_trainer_param_options(t, i, &lr_mult, &decay));
    if (has_lr) lr_mult = lampL_optfield_number(L, group, what, "lr_mult", 1.0);
    if (has_decay) decay = lampL_optfield_boolean(L, group, what, "decay", 1);
    lampL_check(L, lamp_trainer_set_param_options(t, i, lr_mult, decay));
    hits++;
  }
  if (hits == 0)
    luaL_error(L, "%s: pattern '%s' matches no parameter (names look like '%s')", what, lua_tostring(L, pattern),
               lamp_model_n_params(m) ? lamp_model_param_at(m, 0)->name : "");
  lua_pop(L, 1);
}

/* param_groups = { {match = "bias$", decay = false}, {match = "^0%.", lr_mult = 0.1}, ... }:
   later groups override earlier ones for the parameters both match. */
static void apply_param_groups(lua_State *L, lamp_trainer *t) {
  if (lua_getfield(L, 1, "param_groups") == LUA_TNIL) {
    lua_pop(L, 1);
    return;
  }
  if (!lua_istable(L, -1)) luaL_error(L, "Trainer: 'param_groups' must be a list of tables, got %s", luaL_typename(L, -1));
  int groups = lua_gettop(L);
  lua_getglobal(L, "string");
  lua_getfield(L, -1, "find");
  int find = lua_gettop(L);
  lua_Integer n = luaL_len(L, groups);
  for (lua_Integer g = 1; g <= n; g++) {
    if (lua_geti(L, groups, g) != LUA_TTABLE)
      luaL_error(L, "Trainer: param_groups[%d] must be a table, got %s", (int)g, luaL_typename(L, -1));
    apply_group(L, t, find, (int)g);
  }
  lua_settop(L, groups - 1);
}

static int trainer_gc(lua_State *L);

/* compress = "none" (default) | "bf16" | "fp16": the dtype gradients cross the wire in. Any float
   dtype's spelling lamp_dtype_parse knows is taken ("f16", "bfloat16"; "f32" is "none"). */
static lamp_dtype read_compress(lua_State *L) {
  lamp_dtype d = LAMP_F32;
  if (lua_getfield(L, 1, "compress") != LUA_TNIL) {
    const char *name = lua_tostring(L, -1);
    if (name == NULL || (strcmp(name, "none") != 0 && (lamp_dtype_parse(name, &d) != 0 || !lamp_dtype_is_float(d))))
      luaL_error(L, "Trainer: compress must be \"none\", \"bf16\" or \"fp16\", got %s",
                 name ? name : luaL_typename(L, -1));
  }
  lua_pop(L, 1);
  return d;
}

/* (config, trainer box): apply_param_groups under lua_pcall. */
static int apply_param_groups_protected(lua_State *L) {
  lamp_trainer *t = lampL_checkobject(L, 2, LAMP_TRAINER_CLASS);
  lua_settop(L, 1); /* apply_param_groups reads the config at index 1 */
  apply_param_groups(L, t);
  return 0;
}

static int trainer_new(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lampL_check_fields(L, 1, "Trainer", trainer_fields);
  lamp_trainer_config c;
  memset(&c, 0, sizeof c);
  c.model = required_object(L, "model", LAMP_LAYER_CLASS, "e.g. nn.Sequential{...}");
  c.loss = required_object(L, "loss", LAMP_LOSS_CLASS, "e.g. nn.CrossEntropy()");
  c.precision = required_object(L, "precision", LAMP_PRECISION_CLASS, "e.g. lamp.precision('fp32')");
  c.comm = required_object(L, "comm", LAMP_COMM_CLASS, "e.g. lamp.comm('single')");
  c.optim = required_object(L, "optim", LAMP_OPTIM_CLASS, "e.g. lamp.optim('sgd', {lr = 0.05})");
  c.device = lamp_run_device();
  if (lua_getfield(L, 1, "device") != LUA_TNIL) c.device = lampL_check_device(L, -1, "Trainer: 'device'");
  lua_pop(L, 1);
  c.accum = (int)lampL_optfield_range(L, 1, "Trainer", "accum", 1, 1, LAMP_TRAINER_MAX_ACCUM);
  c.clip = lampL_optfield_number(L, 1, "Trainer", "clip", 0.0);
  c.seed = (uint64_t)lampL_optfield_range(L, 1, "Trainer", "seed", 0, 0, LUA_MAXINTEGER);
  c.bucket_mb = lampL_optfield_number(L, 1, "Trainer", "bucket_mb", 25.0);
  /* Lua's 0 turns the limit off; the C config's 0 is the default, its negative values none. */
  lua_Integer max_skipped = lampL_optfield_range(L, 1, "Trainer", "max_skipped", LAMP_TRAINER_DEFAULT_MAX_SKIPPED, 0,
                                                 LUA_MAXINTEGER);
  c.max_skipped = max_skipped == 0 ? -1 : (int64_t)max_skipped;
  c.compress = read_compress(L);
  c.shard_optimizer = lampL_optfield_boolean(L, 1, "Trainer", "shard_optimizer", 0);
  c.schedule = read_schedule(L);
  /* graphs = true | false; absent: wherever the device and the run allow them */
  if (lua_getfield(L, 1, "graphs") != LUA_TNIL)
    c.graphs = lampL_optfield_boolean(L, 1, "Trainer", "graphs", 0) ? LAMP_GRAPHS_ON : LAMP_GRAPHS_OFF;
  lua_pop(L, 1);
  /* metrics = "run.jsonl": rank 0 records every step and epoch there (docs/metrics.md). The
     string stays on the stack until the trainer is made, which copies it. */
  if (lua_getfield(L, 1, "metrics") != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "Trainer: 'metrics' must be a file name (a string), got %s", luaL_typename(L, -1));
    c.metrics = lua_tostring(L, -1);
  }
  lamp_trainer *t;
  lampL_check(L, lamp_trainer_new(&t, &c));
  lua_pop(L, 1);
  lampL_pushbox(L, LAMP_TRAINER_CLASS, t, UV_COUNT);
  int box = lua_gettop(L);
  keep_borrowed(L, box);
  /* A bad group must not leave a half-made trainer holding the model's layers until the GC
     runs: close it at once, so the same layers can go into the next Trainer. */
  lua_pushcfunction(L, apply_param_groups_protected);
  lua_pushvalue(L, 1);
  lua_pushvalue(L, box);
  if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
    lua_pushcfunction(L, trainer_gc);
    lua_pushvalue(L, box);
    lua_call(L, 1, 0);
    return lua_error(L); /* the message is still on the stack top below what we pushed */
  }
  return 1;
}

/* Frees the trainer once, then unpins what it borrowed, so those can be closed again. */
static int trainer_gc(lua_State *L) {
  lamp_trainer *t = lampL_takebox(L, 1, LAMP_TRAINER_CLASS);
  if (t == NULL) return 0;
  lamp_trainer_free(t);
  pin(L, -1, UV_PRECISION, LAMP_PRECISION_CLASS, 1);
  pin(L, -1, UV_COMM, LAMP_COMM_CLASS, 1);
  pin(L, -1, UV_OPTIM, LAMP_OPTIM_CLASS, 1);
  return 0;
}

/* trainer:epoch(loader) -> {loss=, samples=, seconds=, samples_per_s=, done=, steps=, skipped=} */
static int trainer_epoch(lua_State *L) {
  static const char *const fields[] = {"max_steps", NULL};
  lamp_trainer *t = lampL_checkobject(L, 1, LAMP_TRAINER_CLASS);
  lamp_loader *loader = lampL_checkobject(L, 2, LAMP_LOADER_CLASS);
  lua_Integer max_steps = 0;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lampL_check_fields(L, 3, "trainer:epoch", fields);
    max_steps = lampL_optfield_integer(L, 3, "trainer:epoch", "max_steps", 0);
    if (max_steps < 0) luaL_error(L, "trainer:epoch: 'max_steps' must be >= 0 (0: the whole epoch), got %I", max_steps);
  }
  lamp_epoch_result r;
  lampL_check(L, lamp_trainer_train(t, loader, (uint64_t)max_steps, &r));
  lua_createtable(L, 0, 7);
  lampL_setnumber(L, "loss", r.mean_loss);
  lampL_setinteger(L, "samples", (lua_Integer)r.samples);
  lampL_setnumber(L, "seconds", r.seconds);
  lampL_setnumber(L, "samples_per_s", r.samples_per_second);
  lua_pushboolean(L, r.epoch_done);
  lua_setfield(L, -2, "done");
  lampL_setinteger(L, "steps", (lua_Integer)r.steps);
  lampL_setinteger(L, "skipped", (lua_Integer)r.skipped_steps);
  return 1;
}

/*
** trainer:save(path) or trainer:save{dir=, keep=, start_over=} -> the path written (on every rank).
** start_over = true: another run's checkpoints in dir move into dir/previous-<n> instead of the
** save being refused.
*/
static int trainer_save(lua_State *L) {
  static const char *const fields[] = {"dir", "keep", "start_over", NULL};
  lamp_trainer *t = lampL_checkobject(L, 1, LAMP_TRAINER_CLASS);
  char written[4096];
  if (lua_type(L, 2) == LUA_TSTRING) {
    lampL_check(L, lamp_trainer_save(t, lua_tostring(L, 2), written, sizeof written));
  } else {
    if (lua_type(L, 2) != LUA_TTABLE)
      luaL_error(L, "trainer:save: expected a path or a table {dir=, keep=, start_over=}, got %s", luaL_typename(L, 2));
    lampL_check_fields(L, 2, "trainer:save", fields);
    if (lua_getfield(L, 2, "dir") != LUA_TSTRING) luaL_error(L, "trainer:save: 'dir' must be a string, got %s", luaL_typename(L, -1));
    const char *dir = lua_tostring(L, -1);
    lua_Integer keep = lampL_optfield_integer(L, 2, "trainer:save", "keep", 0);
    if (keep < 0 || keep > 1000000) luaL_error(L, "trainer:save: 'keep' must be in [0, 1000000] (0 keeps all), got %I", keep);
    int start_over = lampL_optfield_boolean(L, 2, "trainer:save", "start_over", 0);
    lampL_check(L, lamp_trainer_save_dir(t, dir, (int)keep, start_over, written, sizeof written));
  }
  lua_pushstring(L, written);
  return 1;
}

/* trainer:resume(path_or_dir) -> the path resumed from, or nil when the folder is missing or holds
   none (one whose checkpoints are all damaged raises, naming each) */
static int trainer_resume(lua_State *L) {
  lamp_trainer *t = lampL_checkobject(L, 1, LAMP_TRAINER_CLASS);
  const char *from = luaL_checkstring(L, 2);
  char used[4096];
  int found;
  lampL_check(L, lamp_trainer_resume(t, from, used, sizeof used, &found));
  if (found) lua_pushstring(L, used);
  else lua_pushnil(L);
  return 1;
}

/* trainer:evaluate(loader) -> {accuracy=, loss=, samples=} */
static int trainer_evaluate(lua_State *L) {
  lamp_trainer *t = lampL_checkobject(L, 1, LAMP_TRAINER_CLASS);
  lamp_loader *loader = lampL_checkobject(L, 2, LAMP_LOADER_CLASS);
  lamp_eval_result r;
  lampL_check(L, lamp_trainer_evaluate(t, loader, &r));
  lua_createtable(L, 0, 3);
  lampL_setnumber(L, "accuracy", r.accuracy);
  lampL_setnumber(L, "loss", r.mean_loss);
  lampL_setinteger(L, "samples", (lua_Integer)r.samples);
  return 1;
}

static int trainer_stats(lua_State *L) {
  lamp_trainer *t = lampL_checkobject(L, 1, LAMP_TRAINER_CLASS);
  lamp_trainer_stats s;
  lampL_check(L, lamp_trainer_stats_get(t, &s));
  lua_createtable(L, 0, 18);
  lampL_setinteger(L, "steps", (lua_Integer)s.steps);
  lampL_setinteger(L, "skipped_steps", (lua_Integer)s.skipped_steps);
  lampL_setinteger(L, "skipped_in_a_row", (lua_Integer)s.skipped_in_a_row);
  lampL_setinteger(L, "micro_steps", (lua_Integer)s.micro_steps);
  lampL_setinteger(L, "samples", (lua_Integer)s.samples);
  lampL_setinteger(L, "epochs", (lua_Integer)lamp_trainer_epochs_done(t));
  lampL_setnumber(L, "loss", s.last_loss);
  lampL_setnumber(L, "grad_norm", s.grad_norm);
  lampL_setnumber(L, "lr", s.lr);
  lampL_setnumber(L, "loss_scale", s.loss_scale);
  lampL_setinteger(L, "world", s.world);
  lampL_setinteger(L, "batch", (lua_Integer)s.batch);
  lampL_setinteger(L, "effective_batch", (lua_Integer)s.effective_batch);
  lampL_setinteger(L, "buckets", (lua_Integer)s.buckets);
  lampL_setinteger(L, "buckets_overlapped", (lua_Integer)s.buckets_overlapped);
  lua_pushboolean(L, s.graphs);
  lua_setfield(L, -2, "graphs");
  lampL_setinteger(L, "graph_records", (lua_Integer)s.graph_records);
  lampL_setinteger(L, "graph_replays", (lua_Integer)s.graph_replays);
  return 1;
}

static int trainer_parameters(lua_State *L) {
  lamp_trainer *t = lampL_checkobject(L, 1, LAMP_TRAINER_CLASS);
  lua_pushinteger(L, (lua_Integer)lamp_model_numel(lamp_trainer_model(t)));
  return 1;
}

/* trainer:param_table() -> { {name=, shape={...}, count=, decay=, lr_mult=}, ... } in slab order */
static int trainer_param_table(lua_State *L) {
  lamp_trainer *t = lampL_checkobject(L, 1, LAMP_TRAINER_CLASS);
  lamp_model *m = lamp_trainer_model(t);
  size_t n = lamp_model_n_params(m);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    const lamp_model_param *p = lamp_model_param_at(m, i);
    double lr_mult;
    int decay;
    lampL_check(L, lamp_trainer_param_options(t, i, &lr_mult, &decay));
    lua_createtable(L, 0, 5);
    lua_pushstring(L, p->name);
    lua_setfield(L, -2, "name");
    lua_createtable(L, p->ndim, 0);
    for (int d = 0; d < p->ndim; d++) {
      lua_pushinteger(L, p->shape[d]);
      lua_seti(L, -2, d + 1);
    }
    lua_setfield(L, -2, "shape");
    lampL_setinteger(L, "count", (lua_Integer)p->count);
    lampL_setinteger(L, "offset", (lua_Integer)p->offset);
    lua_pushboolean(L, decay);
    lua_setfield(L, -2, "decay");
    lampL_setnumber(L, "lr_mult", lr_mult);
    lua_seti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int trainer_tostring(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_TRAINER_CLASS);
  if (box->ptr == NULL) {
    lua_pushliteral(L, "lamp.Trainer (closed)");
    return 1;
  }
  lamp_model *m = lamp_trainer_model(box->ptr);
  char buf[8192];
  lamp_layer *root = lamp_model_root(m);
  root->ops->describe(root, buf, sizeof buf);
  lua_pushfstring(L, "lamp.Trainer (%d parameters)\n%s", (int)lamp_model_numel(m), buf);
  return 1;
}

static const luaL_Reg trainer_methods[] = {{"epoch", trainer_epoch},       {"evaluate", trainer_evaluate},
                                           {"stats", trainer_stats},       {"parameters", trainer_parameters},
                                           {"param_table", trainer_param_table},
                                           {"save", trainer_save},         {"resume", trainer_resume},
                                           {"close", trainer_gc},          {NULL, NULL}};

void lampL_open_trainer(lua_State *L) {
  lampL_newclass(L, LAMP_TRAINER_CLASS, trainer_methods, trainer_gc, trainer_tostring);
  lua_pushcfunction(L, trainer_new);
  lua_setfield(L, -2, "Trainer");
}
