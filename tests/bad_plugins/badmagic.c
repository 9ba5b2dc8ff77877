/* Bad magic: "<path>: bad magic 0x12345678 (expected 0x504d414c)". */
#define FAKE_NAME "badmagic"
#define FAKE_MAGIC 0x12345678u
#include "fake_precision.h"
