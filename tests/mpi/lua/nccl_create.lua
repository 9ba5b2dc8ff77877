-- Creates the nccl communicator through the core, which builds its bootstrap over mpi
-- (tests/mpi/test_nccl_core.sh runs it on two ranks of a machine without a GPU driver).
local lamp = require "lamp"
lamp.comm("nccl")
print("nccl_create: the communicator was created")
