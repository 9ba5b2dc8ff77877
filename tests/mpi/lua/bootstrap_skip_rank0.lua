-- A communicator created with the bootstrap (tests/bad_plugins/bootcomm.so, path in LAMP_BOOTCOMM)
-- under lamp-run: rank 0 leaves out its create's exchange and ends, so rank 1's all_gather over
-- the mpi bootstrap times out, naming the operation and rank 0, and the job exits non-zero.
local lamp = require "lamp"
lamp.comm(os.getenv("LAMP_BOOTCOMM"), { skip_rank = 0 })
lamp.log0("rank 0 created bootcomm without the exchange")
