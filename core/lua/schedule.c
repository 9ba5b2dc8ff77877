/*
** lamp.lr: learning-rate schedules as plain tables the Trainer reads, and the linear scaling
** rule. lamp.lr.at(schedule, base_lr, step) evaluates one, for users and tests alike.
*/
#include <stdio.h>
#include <string.h>

#include "lua/lua_util.h"
#include "train/schedule.h"

static const char *const schedule_fields[] = {"kind", "total", "min_lr", "warmup", "step_size", "gamma", NULL};

static uint64_t opt_steps(lua_State *L, int idx, const char *what, const char *field, lua_Integer def) {
  lua_Integer v = lampL_optfield_integer(L, idx, what, field, def);
  if (v < 0) luaL_error(L, "%s: '%s' must be a number of steps >= 0, got %I", what, field, v);
  return (uint64_t)v;
}

/* Reads a schedule from the string or table at idx; raises with the validation message. */
lamp_schedule lampL_check_schedule(lua_State *L, int idx, const char *what) {
  lamp_schedule s = {.kind = LAMP_SCHEDULE_CONSTANT, .gamma = 0.1};
  idx = lua_absindex(L, idx);
  const char *kind;
  int kind_slot = 0;
  if (lua_type(L, idx) == LUA_TSTRING) {
    kind = lua_tostring(L, idx);
  } else {
    if (!lua_istable(L, idx)) luaL_error(L, "%s: schedule must be a name or a lamp.lr table, got %s", what, luaL_typename(L, idx));
    lampL_check_fields(L, idx, what, schedule_fields);
    lua_getfield(L, idx, "kind");
    /* Stays on the stack until compared: a number kind is converted in this slot only, and
       the table would not keep that string alive. */
    kind_slot = lua_gettop(L);
    kind = lua_tostring(L, kind_slot);
    s.total = opt_steps(L, idx, what, "total", 0);
    s.warmup = opt_steps(L, idx, what, "warmup", 0);
    s.step_size = opt_steps(L, idx, what, "step_size", 0);
    s.min_lr = lampL_optfield_number(L, idx, what, "min_lr", 0.0);
    s.gamma = lampL_optfield_number(L, idx, what, "gamma", 0.1);
  }
  if (kind != NULL && strcmp(kind, "cosine") == 0) s.kind = LAMP_SCHEDULE_COSINE;
  else if (kind != NULL && strcmp(kind, "step") == 0) s.kind = LAMP_SCHEDULE_STEP;
  else if (kind == NULL || strcmp(kind, "constant") != 0)
    luaL_error(L, "%s: unknown schedule '%s'; valid schedules: constant, cosine, step", what, kind ? kind : "nil");
  if (kind_slot) lua_remove(L, kind_slot);
  lampL_check(L, lamp_schedule_validate(&s));
  return s;
}

static int push_schedule(lua_State *L, const lamp_schedule *s) {
  lua_createtable(L, 0, 6);
  lua_pushstring(L, lamp_schedule_name(s->kind));
  lua_setfield(L, -2, "kind");
  if (s->kind == LAMP_SCHEDULE_COSINE) {
    lampL_setinteger(L, "total", (lua_Integer)s->total);
    lampL_setinteger(L, "warmup", (lua_Integer)s->warmup);
    lampL_setnumber(L, "min_lr", s->min_lr);
  } else if (s->kind == LAMP_SCHEDULE_STEP) {
    lampL_setinteger(L, "step_size", (lua_Integer)s->step_size);
    lampL_setnumber(L, "gamma", s->gamma);
  }
  return 1;
}

/* Tags the option table at 1 with its kind, validates it, and returns the canonical table. */
static int make_schedule(lua_State *L, const char *kind, const char *what) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_pushstring(L, kind);
  lua_setfield(L, 1, "kind");
  lamp_schedule s = lampL_check_schedule(L, 1, what);
  return push_schedule(L, &s);
}

/* lamp.lr.cosine{total=N, min_lr=0}: the reference recipe's cosine to min_lr over N steps. */
static int lr_cosine(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer total = lampL_optfield_integer(L, 1, "lr.cosine", "total", 0);
  if (total <= 0) return luaL_error(L, "lr.cosine: 'total' (optimizer steps) must be positive, got %I", total);
  return make_schedule(L, "cosine", "lr.cosine");
}

/* lamp.lr.warmup_cosine{warmup=W, total=N, min_lr=0}: linear warm-up over W steps, then cosine. */
static int lr_warmup_cosine(lua_State *L) { return make_schedule(L, "cosine", "lr.warmup_cosine"); }

/* lamp.lr.step{step_size=S, gamma=0.1}: multiply by gamma every S steps. */
static int lr_step(lua_State *L) { return make_schedule(L, "step", "lr.step"); }

static int lr_constant(lua_State *L) {
  lamp_schedule s = {.kind = LAMP_SCHEDULE_CONSTANT};
  return push_schedule(L, &s);
}

/* luaL_error's format knows no %g: the number is formatted here, as the C messages do. */
static int bad_argument(lua_State *L, const char *what, double v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%g", v);
  return luaL_error(L, "lr.linear_scaling: %s, got %s", what, buf);
}

/* lamp.lr.linear_scaling(base_lr, base_batch, effective_batch) -> base_lr * B_eff / base_batch */
static int lr_linear_scaling(lua_State *L) {
  double base_lr = luaL_checknumber(L, 1), base_batch = luaL_checknumber(L, 2), b_eff = luaL_checknumber(L, 3);
  if (!(base_lr >= 0)) return bad_argument(L, "base_lr must be >= 0", base_lr);
  if (!(base_batch > 0)) return bad_argument(L, "base_batch must be > 0", base_batch);
  if (!(b_eff > 0)) return bad_argument(L, "effective batch must be > 0", b_eff);
  lua_pushnumber(L, lamp_linear_scaling(base_lr, base_batch, b_eff));
  return 1;
}

/* lamp.lr.at(schedule, base_lr, step) -> the lr of 0-based optimizer step `step`. */
static int lr_at(lua_State *L) {
  lamp_schedule s = lampL_check_schedule(L, 1, "lr.at");
  double base = luaL_checknumber(L, 2);
  lua_Integer step = luaL_checkinteger(L, 3);
  if (step < 0) return luaL_error(L, "lr.at: step must be >= 0, got %I", step);
  lua_pushnumber(L, lamp_schedule_lr(&s, base, (uint64_t)step));
  return 1;
}

static const luaL_Reg lr_functions[] = {{"constant", lr_constant},
                                        {"cosine", lr_cosine},
                                        {"warmup_cosine", lr_warmup_cosine},
                                        {"step", lr_step},
                                        {"linear_scaling", lr_linear_scaling},
                                        {"at", lr_at},
                                        {NULL, NULL}};

void lampL_open_schedule(lua_State *L) {
  luaL_newlib(L, lr_functions);
  lua_setfield(L, -2, "lr");
}
