/* Valid, for the device tests: an optimizer declaring cuda only (device_optim.h). */
#define FAKE_NAME "devcuda"
#define FAKE_DEVICES (LAMP_BIT(LAMP_CUDA))
#include "device_optim.h"
