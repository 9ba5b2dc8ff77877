/* Element types: sizes and names. The 16-bit conversions are in half.h. */
#ifndef LAMP_TENSOR_DTYPE_H
#define LAMP_TENSOR_DTYPE_H

#include <stddef.h>
#include "lamp/abi.h"

/* Bytes per element; 0 for an unknown dtype. */
size_t lamp_dtype_size(lamp_dtype dtype);

/* 1 for f32, f16 and bf16: the dtypes floating-point tensors, kernels and policies use. */
int lamp_dtype_is_float(lamp_dtype dtype);

/* "f32", "f16", "bf16", "i32", "u8"; "?" for an unknown dtype. */
const char *lamp_dtype_name(lamp_dtype dtype);

/* Parses a name ("fp16" and "float16" are accepted for f16); returns 0 on success. */
int lamp_dtype_parse(const char *name, lamp_dtype *out);

#endif
