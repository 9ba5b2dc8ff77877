/* Valid, for the trainer tests: a fake 2-rank communicator (rank 0 of 2) whose SUM doubles. */
#define FAKE_COMM_NAME "counting_comm"
#define FAKE_COMM_NONBLOCKING 0
#include "fake_comm.h"
