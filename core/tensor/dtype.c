#include "tensor/dtype.h"

#include <string.h>

size_t lamp_dtype_size(lamp_dtype dtype) {
  switch (dtype) {
  case LAMP_F32: return 4;
  case LAMP_F16: return 2;
  case LAMP_BF16: return 2;
  case LAMP_I32: return 4;
  case LAMP_U8: return 1;
  default: return 0;
  }
}

int lamp_dtype_parse(const char *name, lamp_dtype *out) {
  static const struct { const char *name; lamp_dtype dtype; } names[] = {
      {"f32", LAMP_F32},   {"fp32", LAMP_F32}, {"float32", LAMP_F32}, {"f16", LAMP_F16},
      {"fp16", LAMP_F16},  {"float16", LAMP_F16}, {"bf16", LAMP_BF16}, {"bfloat16", LAMP_BF16},
      {"i32", LAMP_I32},   {"int32", LAMP_I32}, {"u8", LAMP_U8},     {"uint8", LAMP_U8}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strcmp(name, names[i].name) == 0) {
      *out = names[i].dtype;
      return 0;
    }
  }
  return -1;
}
