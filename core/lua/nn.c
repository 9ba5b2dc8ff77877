/* lamp.nn: layer and loss constructors. Layers are boxed, reference-counted lamp_layer. */
#include <stdlib.h>

#include "lua/lua_util.h"
#include "nn/layer.h"
#include "nn/loss.h"

static void push_layer(lua_State *L, lamp_layer *layer) { lampL_pushbox(L, LAMP_LAYER_CLASS, layer, 0); }

static lua_Integer check_positive(lua_State *L, int arg, const char *what) {
  lua_Integer v = luaL_checkinteger(L, arg);
  if (v <= 0) luaL_error(L, "%s must be a positive integer, got %d", what, (int)v);
  return v;
}

static int nn_linear(lua_State *L) {
  lua_Integer in = check_positive(L, 1, "nn.Linear: in_features");
  lua_Integer out = check_positive(L, 2, "nn.Linear: out_features");
  int bias = lua_isnoneornil(L, 3) ? 1 : lua_toboolean(L, 3);
  lamp_layer *layer;
  lampL_check(L, lamp_linear_new(&layer, in, out, bias));
  push_layer(L, layer);
  return 1;
}

static int nn_relu(lua_State *L) {
  lamp_layer *layer;
  lampL_check(L, lamp_relu_new(&layer));
  push_layer(L, layer);
  return 1;
}

static int nn_sequential(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer n = luaL_len(L, 1);
  if (n <= 0) return luaL_error(L, "nn.Sequential: expected a list of layers, got an empty table");
  lamp_layer **children = lua_newuserdatauv(L, sizeof *children * (size_t)n, 0); /* freed by the GC */
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, 1, i);
    children[i - 1] = lampL_testobject(L, -1, LAMP_LAYER_CLASS);
    if (children[i - 1] == NULL)
      return luaL_error(L, "nn.Sequential: element %d is a %s, expected a layer", (int)i, luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  lamp_layer *layer;
  lampL_check(L, lamp_sequential_new(&layer, children, (size_t)n));
  push_layer(L, layer);
  return 1;
}

static int nn_cross_entropy(lua_State *L) {
  lamp_loss *loss;
  lampL_check(L, lamp_cross_entropy_new(&loss));
  lampL_pushbox(L, LAMP_LOSS_CLASS, loss, 0);
  return 1;
}

static int layer_gc(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_LAYER_CLASS);
  lamp_layer_release(box->ptr);
  box->ptr = NULL;
  return 0;
}

static int layer_tostring(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_LAYER_CLASS);
  if (box->ptr == NULL) {
    lua_pushliteral(L, "lamp.Layer (closed)");
    return 1;
  }
  lamp_layer *layer = box->ptr;
  char buf[8192];
  layer->ops->describe(layer, buf, sizeof buf);
  lua_pushstring(L, buf);
  return 1;
}

/* Number of parameter elements the layer will have once built. */
static int layer_parameters(lua_State *L) {
  lamp_layer *layer = lampL_checkobject(L, 1, LAMP_LAYER_CLASS);
  lua_Integer total = 0;
  size_t n = layer->ops->param_count(layer);
  for (size_t i = 0; i < n; i++) {
    lamp_param_decl d;
    char name[128];
    lampL_check(L, layer->ops->param_decl(layer, i, &d, name, sizeof name));
    lua_Integer count = 1;
    for (int k = 0; k < d.ndim; k++) count *= d.shape[k];
    total += count;
  }
  lua_pushinteger(L, total);
  return 1;
}

static int layer_type(lua_State *L) {
  lamp_layer *layer = lampL_checkobject(L, 1, LAMP_LAYER_CLASS);
  lua_pushstring(L, layer->ops->type);
  return 1;
}

static int loss_gc(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_LOSS_CLASS);
  lamp_loss_release(box->ptr);
  box->ptr = NULL;
  return 0;
}

static int loss_tostring(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_LOSS_CLASS);
  lua_pushstring(L, box->ptr ? ((lamp_loss *)box->ptr)->ops->type : "lamp.Loss (closed)");
  return 1;
}

static const luaL_Reg layer_methods[] = {
    {"parameters", layer_parameters}, {"type", layer_type}, {"close", layer_gc}, {NULL, NULL}};
static const luaL_Reg loss_methods[] = {{"close", loss_gc}, {NULL, NULL}};

static const luaL_Reg nn_functions[] = {{"Linear", nn_linear},
                                        {"ReLU", nn_relu},
                                        {"Sequential", nn_sequential},
                                        {"CrossEntropy", nn_cross_entropy},
                                        {NULL, NULL}};

void lampL_open_nn(lua_State *L) {
  lampL_newclass(L, LAMP_LAYER_CLASS, layer_methods, layer_gc, layer_tostring);
  lampL_newclass(L, LAMP_LOSS_CLASS, loss_methods, loss_gc, loss_tostring);
  luaL_newlib(L, nn_functions);
  lua_setfield(L, -2, "nn");
}
