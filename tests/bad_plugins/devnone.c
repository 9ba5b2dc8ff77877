/* Valid, for the device tests: an optimizer declaring no device (device_optim.h). Built against
   ABI 1.1, where devices 0 means it runs nowhere: "devnone: does not run on cpu (its devices:
   none)". */
#define FAKE_NAME "devnone"
#define FAKE_DEVICES 0
#include "device_optim.h"
