/*
** lamp.checkpoint.info(path) -> string: the header and tensor table of a checkpoint, for a
** script to print (the file is validated completely first; a bad file raises its message).
** lamp.checkpoint.latest(dir) -> path, step | nil: the newest complete checkpoint of a folder
** (nil for an empty or missing one; a folder whose checkpoints are all damaged raises).
*/
#include <stdlib.h>

#include <lauxlib.h>

#include "checkpoint/checkpoint.h"
#include "lua/checkpoint.h"
#include "lua/lua_util.h"

static int checkpoint_info(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  char *text;
  lampL_check(L, lamp_ckpt_info(path, &text));
  lua_pushstring(L, text);
  free(text);
  return 1;
}

static int checkpoint_latest(lua_State *L) {
  const char *dir = luaL_checkstring(L, 1);
  char path[4096];
  uint64_t step = 0;
  int found = 0;
  lampL_check(L, lamp_ckpt_latest(dir, path, sizeof path, &step, &found));
  if (!found) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushstring(L, path);
  lua_pushinteger(L, (lua_Integer)step);
  return 2;
}

static const luaL_Reg checkpoint_functions[] = {{"info", checkpoint_info}, {"latest", checkpoint_latest}, {NULL, NULL}};

void lampL_open_checkpoint(lua_State *L) {
  luaL_newlib(L, checkpoint_functions);
  lua_setfield(L, -2, "checkpoint");
}
