/* Element types: sizes and parsing. Names and the float test are lamp/abi.h's inline helpers
   (lamp_dtype_name, lamp_dtype_is_float), shared with plugins. The 16-bit conversions are in half.h. */
#ifndef LAMP_TENSOR_DTYPE_H
#define LAMP_TENSOR_DTYPE_H

#include <stddef.h>
#include "lamp/abi.h"

/* Bytes per element; 0 for an unknown dtype. */
size_t lamp_dtype_size(lamp_dtype dtype);

/* Parses a name ("fp16" and "float16" are accepted for f16); returns 0 on success. */
int lamp_dtype_parse(const char *name, lamp_dtype *out);

#endif
