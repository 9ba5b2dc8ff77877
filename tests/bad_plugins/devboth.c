/* Valid, for the device tests: an optimizer declaring the CPU and cuda (device_optim.h). */
#define FAKE_NAME "devboth"
#define FAKE_DEVICES (LAMP_BIT(LAMP_CPU) | LAMP_BIT(LAMP_CUDA))
#include "device_optim.h"
