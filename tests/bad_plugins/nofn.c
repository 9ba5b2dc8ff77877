/* Required function missing: "<path>: required function 'create' is NULL". */
#define FAKE_NAME "nofn"
#define FAKE_CREATE NULL
#include "fake_optim.h"
