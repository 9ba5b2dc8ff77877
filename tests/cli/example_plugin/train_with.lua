-- Trains a small MLP with the optimizer plugin at the path given as the first argument.
local lamp = require "lamp"
local nn = lamp.nn
local path = assert(arg[1], "usage: train_with.lua PLUGIN.so")
local train = lamp.data.idx("fashion-mnist", "train"):subset(1, 1000)
local loader = lamp.data.loader(train, { batch = 50, shuffle = true, seed = 1 })
local trainer = lamp.Trainer {
  model = nn.Sequential { nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10) },
  loss = nn.CrossEntropy(), precision = lamp.precision("fp32"), comm = lamp.comm("single"),
  optim = lamp.optim(path, { lr = 0.1 }), seed = 1,
}
local first = trainer:epoch(loader).loss
local last
for _ = 1, 3 do last = trainer:epoch(loader).loss end
print(string.format("plugin %s: loss %.4f -> %.4f", path, first, last))
assert(last < 0.7 * first, "training with the third-party plugin must lower the loss")
