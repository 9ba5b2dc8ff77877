/* Valid, for the bucket tests: counting_comm plus non-blocking all_reduce_start/wait, logged. */
#define FAKE_COMM_NAME "recording_comm"
#define FAKE_COMM_NONBLOCKING 1
#include "fake_comm.h"
