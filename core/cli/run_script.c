/* Runs a Lua script with the lamp module preloaded; an uncaught error exits with status 1. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>

#include "backend/backend.h"
#include "cli/commands.h"
#include "lua/module.h"

/* Message handler: appends a traceback to string errors. */
static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* arg[0] = script, arg[1..n] = its arguments, arg[-1] = the executable, as lua(1) does. */
static void set_arg_table(lua_State *L, const char *script, int argc, char **argv) {
  lua_createtable(L, argc, 2);
  lua_pushstring(L, "lamp");
  lua_seti(L, -2, -1);
  lua_pushstring(L, script);
  lua_seti(L, -2, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_seti(L, -2, i + 1);
  }
  lua_setglobal(L, "arg");
}

static int run(lua_State *L, const char *script, int argc, char **argv) {
  luaL_openlibs(L);
  luaL_requiref(L, "lamp", luaopen_lamp, 0);
  lua_pop(L, 1);
  set_arg_table(L, script, argc, argv);
  lua_pushcfunction(L, traceback);
  if (luaL_loadfile(L, script) != LUA_OK) {
    fprintf(stderr, "lamp: %s\n", lua_tostring(L, -1));
    return 1;
  }
  for (int i = 0; i < argc; i++) lua_pushstring(L, argv[i]);
  if (lua_pcall(L, argc, 0, 1) != LUA_OK) {
    fprintf(stderr, "lamp: %s\n", lua_tostring(L, -1));
    return 1;
  }
  return 0;
}

int lamp_cmd_run_script(const char *script, int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    fprintf(stderr, "lamp: cannot create a Lua state: out of memory\n");
    return 1;
  }
  int status = run(L, script, argc, argv);
  lua_close(L); /* runs every finaliser: plugins close, memory returns to the ledger */
  lamp_backend_release_workspace(); /* the main thread's GEMM workspace, which no thread exit frees */
  return status;
}
