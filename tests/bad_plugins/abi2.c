/* ABI major mismatch: "abi2: plugin ABI 2.0 not supported by this core (ABI 1.x): <path>". */
#define FAKE_NAME "abi2"
#define FAKE_ABI_MAJOR 2
#define FAKE_ABI_MINOR 0
#include "fake_precision.h"
