/* The entry of the `lamp` Lua module (registered by the lamp executable). */
#ifndef LAMP_LUA_MODULE_H
#define LAMP_LUA_MODULE_H

#include <lua.h>

int luaopen_lamp(lua_State *L);

#endif
