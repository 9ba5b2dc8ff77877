/* Struct too small: "<path>: table is 40 bytes, ABI 1.4 precision plugins need at least 120". */
#define FAKE_NAME "small"
#define FAKE_STRUCT_SIZE 40
#include "fake_precision.h"
