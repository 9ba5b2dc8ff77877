/* Valid, for the device tests: an optimizer declaring the CPU only (device_optim.h). */
#define FAKE_NAME "devcpu"
#define FAKE_DEVICES (LAMP_BIT(LAMP_CPU))
#include "device_optim.h"
