/* lamp.nn: layer and loss constructors. Layers are boxed, reference-counted lamp_layer. */
#include <stdio.h>
#include <stdlib.h>

#include "lua/lua_util.h"
#include "nn/layer.h"
#include "nn/loss.h"

static void push_layer(lua_State *L, lamp_layer *layer) { lampL_pushbox(L, LAMP_LAYER_CLASS, layer, 0); }

/* A positive whole number, judged as given (1.5, true and 2^63 are refused, not converted). */
static lua_Integer check_positive(lua_State *L, int arg, const char *what) {
  int ok = lua_type(L, arg) == LUA_TNUMBER;
  lua_Integer v = ok ? lua_tointegerx(L, arg, &ok) : 0;
  if (!ok || v <= 0) luaL_error(L, "%s must be a positive integer, got %s", what, lampL_value_text(L, arg));
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

/* An optional options table at arg: nil or a table with only the `valid` fields. */
static int opt_table(lua_State *L, int arg, const char *what, const char *const *valid) {
  if (lua_isnoneornil(L, arg)) return 0;
  if (!lua_istable(L, arg))
    return luaL_error(L, "%s: argument %d (options) must be a table, got %s", what, arg, luaL_typename(L, arg));
  lampL_check_fields(L, arg, what, valid);
  return 1;
}

/* A non-negative (or positive) integer field of the options table, or def. */
static lua_Integer opt_count(lua_State *L, int arg, int has, const char *what, const char *field, lua_Integer def,
                             lua_Integer min) {
  if (!has) return def;
  lua_Integer v = lampL_optfield_integer(L, arg, what, field, def);
  if (v < min) luaL_error(L, "%s: '%s' must be %s, got %I", what, field, min > 0 ? "positive" : "non-negative", (LUAI_UACINT)v);
  return v;
}

/* nn.Conv2d(in, out, kernel, {stride=1, padding=0, dilation=1, groups=1, bias=true}) */
static int nn_conv2d(lua_State *L) {
  static const char *const valid[] = {"stride", "padding", "dilation", "groups", "bias", NULL};
  const char *what = "nn.Conv2d";
  lua_Integer in = check_positive(L, 1, "nn.Conv2d: in_channels");
  lua_Integer out = check_positive(L, 2, "nn.Conv2d: out_channels");
  lua_Integer k = check_positive(L, 3, "nn.Conv2d: kernel_size");
  int has = opt_table(L, 4, what, valid);
  lamp_conv2d_options o = {
      .stride = opt_count(L, 4, has, what, "stride", 1, 1),
      .padding = opt_count(L, 4, has, what, "padding", 0, 0),
      .dilation = opt_count(L, 4, has, what, "dilation", 1, 1),
      .groups = opt_count(L, 4, has, what, "groups", 1, 1),
      .no_bias = has ? !lampL_optfield_boolean(L, 4, what, "bias", 1) : 0,
  };
  lamp_layer *layer;
  lampL_check(L, lamp_conv2d_new(&layer, in, out, k, &o));
  push_layer(L, layer);
  return 1;
}

/* nn.BatchNorm2d(channels, {momentum=0.1, eps=1e-5, affine=true}) */
static int nn_batchnorm2d(lua_State *L) {
  static const char *const valid[] = {"momentum", "eps", "affine", NULL};
  const char *what = "nn.BatchNorm2d";
  lua_Integer c = check_positive(L, 1, "nn.BatchNorm2d: num_features");
  int has = opt_table(L, 2, what, valid);
  lamp_batchnorm_options o = {.momentum = 0.1, .eps = 1e-5};
  if (has) {
    o.momentum = lampL_optfield_number(L, 2, what, "momentum", 0.1);
    o.eps = lampL_optfield_number(L, 2, what, "eps", 1e-5);
    o.no_affine = !lampL_optfield_boolean(L, 2, what, "affine", 1);
    char text[64];
    if (!(o.momentum > 0 && o.momentum <= 1))
      return luaL_error(L, "%s: 'momentum' must be in (0, 1], got %s", what, lampL_number_text(o.momentum, text, sizeof text));
    if (!(o.eps > 0)) return luaL_error(L, "%s: 'eps' must be positive, got %s", what, lampL_number_text(o.eps, text, sizeof text));
  }
  lamp_layer *layer;
  lampL_check(L, lamp_batchnorm2d_new(&layer, c, &o));
  push_layer(L, layer);
  return 1;
}

/* nn.MaxPool2d(kernel, {stride=kernel, padding=0}) and nn.AvgPool2d(...) */
static int pool2d(lua_State *L, const char *what, lamp_status (*make)(lamp_layer **, int64_t, int64_t, int64_t)) {
  static const char *const valid[] = {"stride", "padding", NULL};
  char arg_name[64];
  snprintf(arg_name, sizeof arg_name, "%s: kernel_size", what);
  lua_Integer k = check_positive(L, 1, arg_name);
  int has = opt_table(L, 2, what, valid);
  lua_Integer stride = opt_count(L, 2, has, what, "stride", k, 1);
  lua_Integer pad = opt_count(L, 2, has, what, "padding", 0, 0);
  lamp_layer *layer;
  lampL_check(L, make(&layer, k, stride, pad));
  push_layer(L, layer);
  return 1;
}

static int nn_maxpool2d(lua_State *L) { return pool2d(L, "nn.MaxPool2d", lamp_maxpool2d_new); }
static int nn_avgpool2d(lua_State *L) { return pool2d(L, "nn.AvgPool2d", lamp_avgpool2d_new); }

static int nn_global_avgpool(lua_State *L) {
  lamp_layer *layer;
  lampL_check(L, lamp_global_avgpool_new(&layer));
  push_layer(L, layer);
  return 1;
}

static int nn_flatten(lua_State *L) {
  lamp_layer *layer;
  lampL_check(L, lamp_flatten_new(&layer));
  push_layer(L, layer);
  return 1;
}

/* nn.Dropout(p = 0.5) */
static int nn_dropout(lua_State *L) {
  lua_Number p = 0.5;
  if (!lua_isnoneornil(L, 1)) {
    p = lua_tonumber(L, 1);
    if (lua_type(L, 1) != LUA_TNUMBER || !(p >= 0 && p < 1))
      return luaL_error(L, "nn.Dropout: p must be a number in [0, 1), got %s", lampL_value_text(L, 1));
  }
  lamp_layer *layer;
  lampL_check(L, lamp_dropout_new(&layer, p));
  push_layer(L, layer);
  return 1;
}

/* nn.Residual(block, {projection = layer}) */
static int nn_residual(lua_State *L) {
  static const char *const valid[] = {"projection", NULL};
  lamp_layer *block = lampL_testobject(L, 1, LAMP_LAYER_CLASS);
  if (block == NULL) return luaL_error(L, "nn.Residual: argument 1 (block) must be a layer, got %s", luaL_typename(L, 1));
  lamp_layer *proj = NULL;
  if (opt_table(L, 2, "nn.Residual", valid)) {
    lua_getfield(L, 2, "projection");
    if (!lua_isnil(L, -1)) {
      proj = lampL_testobject(L, -1, LAMP_LAYER_CLASS);
      if (proj == NULL)
        return luaL_error(L, "nn.Residual: 'projection' must be a layer, got %s", luaL_typename(L, -1));
    }
    lua_pop(L, 1);
  }
  lamp_layer *layer;
  lampL_check(L, lamp_residual_new(&layer, block, proj));
  push_layer(L, layer);
  return 1;
}

/* nn.Recompute(module) */
static int nn_recompute(lua_State *L) {
  lamp_layer *module = lampL_testobject(L, 1, LAMP_LAYER_CLASS);
  if (module == NULL)
    return luaL_error(L, "nn.Recompute: argument 1 (module) must be a layer, got %s", luaL_typename(L, 1));
  lamp_layer *layer;
  lampL_check(L, lamp_recompute_new(&layer, module));
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
  lamp_layer_release(lampL_takebox(L, 1, LAMP_LAYER_CLASS));
  return 0;
}

static int layer_tostring(lua_State *L) {
  lampL_box *box = luaL_checkudata(L, 1, LAMP_LAYER_CLASS);
  if (box->ptr == NULL) {
    lua_pushliteral(L, "lamp.Layer (closed)");
    return 1;
  }
  /* the tree with each layer's parameter count and the total (lamp_layer_summary) */
  lamp_layer *layer = box->ptr;
  size_t size = 1 << 16;
  char *buf = lua_newuserdatauv(L, size, 0); /* freed by the GC */
  lamp_layer_summary(layer, buf, size);
  lua_pushstring(L, buf);
  return 1;
}

/* Number of parameter elements the layer will have once built. */
static int layer_parameters(lua_State *L) {
  lamp_layer *layer = lampL_checkobject(L, 1, LAMP_LAYER_CLASS);
  size_t total;
  lampL_check(L, lamp_layer_param_numel(layer, &total));
  lua_pushinteger(L, (lua_Integer)total);
  return 1;
}

static int layer_type(lua_State *L) {
  lamp_layer *layer = lampL_checkobject(L, 1, LAMP_LAYER_CLASS);
  lua_pushstring(L, layer->ops->type);
  return 1;
}

static int loss_gc(lua_State *L) {
  lamp_loss_release(lampL_takebox(L, 1, LAMP_LOSS_CLASS));
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
                                        {"Conv2d", nn_conv2d},
                                        {"BatchNorm2d", nn_batchnorm2d},
                                        {"MaxPool2d", nn_maxpool2d},
                                        {"AvgPool2d", nn_avgpool2d},
                                        {"GlobalAvgPool", nn_global_avgpool},
                                        {"Flatten", nn_flatten},
                                        {"Dropout", nn_dropout},
                                        {"Residual", nn_residual},
                                        {"Recompute", nn_recompute},
                                        {"CrossEntropy", nn_cross_entropy},
                                        {NULL, NULL}};

void lampL_open_nn(lua_State *L) {
  lampL_newclass(L, LAMP_LAYER_CLASS, layer_methods, layer_gc, layer_tostring);
  lampL_newclass(L, LAMP_LOSS_CLASS, loss_methods, loss_gc, loss_tostring);
  luaL_newlib(L, nn_functions);
  lua_setfield(L, -2, "nn");
}
