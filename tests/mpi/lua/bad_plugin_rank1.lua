-- Rank 1 asks for a precision plugin that does not exist; rank 0 carries on into the Trainer,
-- whose initial broadcast can never complete: it must stop within the timeout, naming rank 1.
local lamp = require "lamp"
local nn = lamp.nn
local comm = lamp.comm("auto")
local precision = lamp.precision(comm:rank() == 1 and "nosuch16" or "fp32")
lamp.Trainer {
  model = nn.Sequential { nn.Linear(8, 4) }, loss = nn.CrossEntropy(), precision = precision, comm = comm,
  optim = lamp.optim("sgd", { lr = 0.1 }),
}
lamp.log0("rank 0 built a trainer without rank 1")
