/* lamp.Trainer and lamp.lr: the training loop from Lua. */
#include <string.h>

#include "lua/lua_util.h"
#include "train/trainer.h"

/* User values of a Trainer box: the objects it borrows, kept alive and pinned. */
enum { UV_PRECISION = 1, UV_COMM, UV_OPTIM, UV_COUNT = UV_OPTIM };

static const char *const trainer_fields[] = {"model", "loss", "precision", "comm", "optim", "accum",
                                             "clip",  "schedule", "seed", NULL};
static const char *const schedule_fields[] = {"kind", "total", "min_lr", NULL};

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

/* schedule = "constant" | "cosine" | lamp.lr.cosine{total=, min_lr=} */
static lamp_schedule read_schedule(lua_State *L, uint64_t default_total) {
  lamp_schedule s = {LAMP_SCHEDULE_CONSTANT, default_total, 0.0};
  int type = lua_getfield(L, 1, "schedule");
  if (type == LUA_TNIL) {
    lua_pop(L, 1);
    return s;
  }
  if (type == LUA_TSTRING) lua_pushvalue(L, -1);
  else {
    luaL_argexpected(L, type == LUA_TTABLE, 1, "'schedule' to be a string or lamp.lr table");
    lampL_check_fields(L, -1, "Trainer schedule", schedule_fields);
    s.total = (uint64_t)lampL_optfield_integer(L, lua_gettop(L), "Trainer schedule", "total", 0);
    s.min_lr = lampL_optfield_number(L, lua_gettop(L), "Trainer schedule", "min_lr", 0.0);
    lua_getfield(L, -1, "kind");
  }
  const char *kind = lua_tostring(L, -1);
  if (kind != NULL && strcmp(kind, "cosine") == 0) s.kind = LAMP_SCHEDULE_COSINE;
  else if (kind == NULL || strcmp(kind, "constant") != 0)
    luaL_error(L, "Trainer: unknown schedule '%s'; valid schedules: constant, cosine", kind ? kind : "nil");
  lua_pop(L, 2);
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
  c.device = LAMP_CPU;
  c.accum = (int)lampL_optfield_integer(L, 1, "Trainer", "accum", 1);
  c.clip = lampL_optfield_number(L, 1, "Trainer", "clip", 0.0);
  c.seed = (uint64_t)lampL_optfield_integer(L, 1, "Trainer", "seed", 0);
  c.schedule = read_schedule(L, 0);
  lamp_trainer *t;
  lampL_check(L, lamp_trainer_new(&t, &c));
  lampL_pushbox(L, LAMP_TRAINER_CLASS, t, UV_COUNT);
  keep_borrowed(L, lua_gettop(L));
  return 1;
}

static int trainer_gc(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_TRAINER_CLASS);
  if (box->ptr == NULL) return 0;
  lamp_trainer_free(box->ptr);
  box->ptr = NULL;
  pin(L, -1, UV_PRECISION, LAMP_PRECISION_CLASS, 1);
  pin(L, -1, UV_COMM, LAMP_COMM_CLASS, 1);
  pin(L, -1, UV_OPTIM, LAMP_OPTIM_CLASS, 1);
  return 0;
}

static void set_number(lua_State *L, const char *k, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, k);
}

static void set_integer(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

/* trainer:epoch(loader) -> {loss=, samples=, seconds=, samples_per_s=} */
static int trainer_epoch(lua_State *L) {
  lamp_trainer *t = lampL_checkobject(L, 1, LAMP_TRAINER_CLASS);
  lamp_loader *loader = lampL_checkobject(L, 2, LAMP_LOADER_CLASS);
  lamp_epoch_result r;
  lampL_check(L, lamp_trainer_epoch(t, loader, &r));
  lua_createtable(L, 0, 4);
  set_number(L, "loss", r.mean_loss);
  set_integer(L, "samples", (lua_Integer)r.samples);
  set_number(L, "seconds", r.seconds);
  set_number(L, "samples_per_s", r.samples_per_second);
  return 1;
}

/* trainer:evaluate(loader) -> {accuracy=, loss=, samples=} */
static int trainer_evaluate(lua_State *L) {
  lamp_trainer *t = lampL_checkobject(L, 1, LAMP_TRAINER_CLASS);
  lamp_loader *loader = lampL_checkobject(L, 2, LAMP_LOADER_CLASS);
  lamp_eval_result r;
  lampL_check(L, lamp_trainer_evaluate(t, loader, &r));
  lua_createtable(L, 0, 3);
  set_number(L, "accuracy", r.accuracy);
  set_number(L, "loss", r.mean_loss);
  set_integer(L, "samples", (lua_Integer)r.samples);
  return 1;
}

static int trainer_stats(lua_State *L) {
  lamp_trainer *t = lampL_checkobject(L, 1, LAMP_TRAINER_CLASS);
  lamp_trainer_stats s;
  lampL_check(L, lamp_trainer_stats_get(t, &s));
  lua_createtable(L, 0, 12);
  set_integer(L, "steps", (lua_Integer)s.steps);
  set_integer(L, "skipped_steps", (lua_Integer)s.skipped_steps);
  set_integer(L, "micro_steps", (lua_Integer)s.micro_steps);
  set_integer(L, "samples", (lua_Integer)s.samples);
  set_integer(L, "epochs", (lua_Integer)lamp_trainer_epochs_done(t));
  set_number(L, "loss", s.last_loss);
  set_number(L, "grad_norm", s.grad_norm);
  set_number(L, "lr", s.lr);
  set_number(L, "loss_scale", s.loss_scale);
  set_integer(L, "world", s.world);
  set_integer(L, "batch", (lua_Integer)s.batch);
  set_integer(L, "effective_batch", (lua_Integer)s.effective_batch);
  return 1;
}

static int trainer_parameters(lua_State *L) {
  lamp_trainer *t = lampL_checkobject(L, 1, LAMP_TRAINER_CLASS);
  lua_pushinteger(L, (lua_Integer)lamp_model_numel(lamp_trainer_model(t)));
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

/* lamp.lr.cosine{total=N, min_lr=0} and lamp.lr.constant(): plain tables the Trainer reads. */
static int lr_cosine(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lampL_check_fields(L, 1, "lr.cosine", schedule_fields);
  lua_Integer total = lampL_optfield_integer(L, 1, "lr.cosine", "total", 0);
  if (total <= 0) return luaL_error(L, "lr.cosine: 'total' (optimizer steps) must be positive, got %d", (int)total);
  lua_Number min_lr = lampL_optfield_number(L, 1, "lr.cosine", "min_lr", 0.0);
  lua_createtable(L, 0, 3);
  lua_pushliteral(L, "cosine");
  lua_setfield(L, -2, "kind");
  set_integer(L, "total", total);
  set_number(L, "min_lr", min_lr);
  return 1;
}

static int lr_constant(lua_State *L) {
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "constant");
  lua_setfield(L, -2, "kind");
  return 1;
}

static const luaL_Reg trainer_methods[] = {{"epoch", trainer_epoch},       {"evaluate", trainer_evaluate},
                                           {"stats", trainer_stats},       {"parameters", trainer_parameters},
                                           {"close", trainer_gc},          {NULL, NULL}};
static const luaL_Reg lr_functions[] = {{"cosine", lr_cosine}, {"constant", lr_constant}, {NULL, NULL}};

void lampL_open_trainer(lua_State *L) {
  lampL_newclass(L, LAMP_TRAINER_CLASS, trainer_methods, trainer_gc, trainer_tostring);
  lua_pushcfunction(L, trainer_new);
  lua_setfield(L, -2, "Trainer");
  luaL_newlib(L, lr_functions);
  lua_setfield(L, -2, "lr");
}
