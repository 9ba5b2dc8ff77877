/* lamp.checkpoint: reading checkpoint files from Lua (the trainer saves and resumes them). */
#ifndef LAMP_LUA_CHECKPOINT_H
#define LAMP_LUA_CHECKPOINT_H

#include <lua.h>

/* Sets lamp.checkpoint on the module table at the top of the stack; pushes nothing. */
void lampL_open_checkpoint(lua_State *L);

#endif
