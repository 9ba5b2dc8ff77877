-- Trains until stopped from outside (at most 120 s, so a job the launcher fails to end does
-- not run for ever). Each rank writes its pid to <dir>/rank<R>.pid before the first step.
-- Usage: lamp train_long.lua DIR [tag]   (the tag only marks the processes for the test)
local lamp = require "lamp"
local nn = lamp.nn
local dir = assert(arg[1], "usage: train_long.lua DIR [tag]")
local comm = lamp.comm("auto")
local train = lamp.data.idx("fashion-mnist", "train"):subset(1, 2000)
local loader = lamp.data.loader(train, { batch = 50, shuffle = true, comm = comm })
local trainer = lamp.Trainer {
  model = nn.Sequential { nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10) }, loss = nn.CrossEntropy(),
  precision = lamp.precision("fp32"), comm = comm, optim = lamp.optim("sgd", { lr = 0.1 }),
}
trainer:epoch(loader)
local pid_file = string.format("%s/rank%d.pid", dir, comm:rank())
os.execute(string.format("echo $PPID > %s.tmp && mv %s.tmp %s", pid_file, pid_file, pid_file))
local stop = os.time() + 120
while os.time() < stop do trainer:epoch(loader) end
lamp.log("trained for 120 s: nobody stopped this job")
