-- Rank 1 is SIGKILLed after one epoch; rank 0 must stop within the timeout, naming rank 1.
local lamp = require "lamp"
local nn = lamp.nn
local comm = lamp.comm("auto")
local train = lamp.data.idx("fashion-mnist", "train"):subset(1, 2000)
local loader = lamp.data.loader(train, { batch = 50, shuffle = true, comm = comm })
local trainer = lamp.Trainer {
  model = nn.Sequential { nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10) }, loss = nn.CrossEntropy(),
  precision = lamp.precision("fp32"), comm = comm, optim = lamp.optim("sgd", { lr = 0.1 }),
}
trainer:epoch(loader)
if comm:rank() == 1 then os.execute("kill -9 $PPID") end -- the shell's parent is this lamp process
trainer:epoch(loader)
lamp.log0("rank 0 finished although rank 1 died")
