/* Valid, but declares itself 'lion': found under another name (a file named adam.so, or a
** search-path entry without '?'), the loader must refuse it rather than answer with it. */
#define FAKE_NAME "lion"
#include "fake_optim.h"
