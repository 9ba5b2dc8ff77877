/*
** Shared helpers of the `lamp` Lua module: raising C errors into Lua, boxed C objects with
** one idempotent finaliser for __gc and __close, and option tables.
*/
#ifndef LAMP_LUA_UTIL_H
#define LAMP_LUA_UTIL_H

#include <lauxlib.h>
#include <lua.h>

#include "lamp/abi.h"
#include "plugin/instance.h"
#include "train/schedule.h"

/* Raises the current lamp_last_error() as a Lua error. Never returns. */
int lampL_error(lua_State *L);

/* Raises when st is not LAMP_OK. */
#define lampL_check(L, st) \
  do { \
    if ((st) != LAMP_OK) lampL_error(L); \
  } while (0)

/*
** A boxed C object: the userdata holds only the pointer, NULL once finalised. The metatable
** `tname` is created by lampL_newclass; `release` frees the object.
*/
typedef struct lampL_box {
  void *ptr;
  int pins; /* how many other objects borrow ptr: closing is refused while > 0 */
} lampL_box;

/* Registers a class: methods reachable through __index, __gc and __close calling `gc`,
   __tostring, __name = tname. Leaves nothing on the stack. */
void lampL_newclass(lua_State *L, const char *tname, const luaL_Reg *methods, lua_CFunction gc,
                    lua_CFunction tostring);

/* Pushes a new box of class tname with `nuv` user values, holding ptr. */
lampL_box *lampL_pushbox(lua_State *L, const char *tname, void *ptr, int nuv);

/*
** For finalisers: takes the pointer out of the box at idx (NULL if already closed) so the
** caller frees it exactly once. Raises when another object still borrows it.
*/
void *lampL_takebox(lua_State *L, int idx, const char *tname);

/* The live object at idx, raising "bad argument #i (lamp.X expected, got Y)" or
   "attempt to use a closed lamp.X". */
void *lampL_checkobject(lua_State *L, int idx, const char *tname);

/* The object if idx is a live box of tname, else NULL (no error). */
void *lampL_testobject(lua_State *L, int idx, const char *tname);

/*
** Reads a table of name = value into *out for the plugin desc: numbers (and a flag's booleans)
** into nums, strings into texts, at most max of each (names and texts point into the Lua strings,
** valid while the table is on the stack). Raises, with desc's name first: on a name desc does not
** declare (listing the valid ones, whatever the value), on a boolean for a parameter that is not
** a flag (range [0, 1], default 0 or 1), on anything but a number or boolean for a numeric
** parameter, on anything but a string or number for a text one (a number there is refused by
** lamp_options_resolve, in the same words), on a non-string key, or on more than max entries.
** Ranges and an enum's choices are lamp_options_resolve's to check.
*/
void lampL_options(lua_State *L, int idx, const lamp_plugin *desc, lamp_options *out, lamp_option *nums,
                   lamp_text_option *texts, size_t max);

/* The value at idx as a user wrote it, for messages: 4294967297, 1.5, 1e+20, true, the string "x",
   table. The text is pushed onto the stack (it stays there until the caller's error unwinds). */
const char *lampL_value_text(lua_State *L, int idx);
/* A number as its shortest exact text: integral values without a fraction (4294967297). */
const char *lampL_number_text(lua_Number v, char *buf, size_t size);

/* Raises "<what>: unknown field 'x'; valid fields: a, b, c" for any string key of the table at
   idx not in `valid` (NULL-terminated). */
void lampL_check_fields(lua_State *L, int idx, const char *what, const char *const *valid);

/*
** Field readers for configuration tables: the default when absent, a raised error naming the
** field and showing the value given when the type is wrong. Numbers are judged as given, before
** any narrowing: an integer field refuses 1.5, 1e20 and true; lampL_optfield_range also refuses
** what lies outside [min, max] ("Trainer: 'accum' must be an integer in [1, 65536], got
** 4294967297"), so the caller may narrow the result to any type that holds that range.
*/
lua_Integer lampL_optfield_integer(lua_State *L, int idx, const char *what, const char *field, lua_Integer def);
lua_Integer lampL_optfield_range(lua_State *L, int idx, const char *what, const char *field, lua_Integer def,
                                 lua_Integer min, lua_Integer max);
lua_Number lampL_optfield_number(lua_State *L, int idx, const char *what, const char *field, lua_Number def);
int lampL_optfield_boolean(lua_State *L, int idx, const char *what, const char *field, int def);

/* t[k] = v for the table at the top of the stack. */
void lampL_setinteger(lua_State *L, const char *k, lua_Integer v);
void lampL_setnumber(lua_State *L, const char *k, lua_Number v);

/* Registration of the submodules; each pushes nothing and fills the table at -1. */
void lampL_open_nn(lua_State *L);
void lampL_open_data(lua_State *L);
void lampL_open_plugins(lua_State *L);
void lampL_open_trainer(lua_State *L);
void lampL_open_schedule(lua_State *L);
void lampL_open_device(lua_State *L);

/* A schedule from the Lua value at idx (a name or a lamp.lr table), validated; `what` names the
   caller in messages. The Trainer reads its `schedule` field with it. */
lamp_schedule lampL_check_schedule(lua_State *L, int idx, const char *what);
/* A device named at idx ("sim", "cuda:1") or described by a lamp.device() table; raises why it
   cannot be used. An ordinal in it is selected. */
lamp_device lampL_check_device(lua_State *L, int idx, const char *what);

#define LAMP_LAYER_CLASS "lamp.Layer"
#define LAMP_LOSS_CLASS "lamp.Loss"
#define LAMP_DATASET_CLASS "lamp.Dataset"
#define LAMP_LOADER_CLASS "lamp.Loader"
#define LAMP_PRECISION_CLASS "lamp.Precision"
#define LAMP_COMM_CLASS "lamp.Comm"
#define LAMP_OPTIM_CLASS "lamp.Optim"
#define LAMP_TRAINER_CLASS "lamp.Trainer"

#endif
