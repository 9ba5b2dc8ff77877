-- End to end: a small MLP trained on a 2,000-sample subset of Fashion-MNIST through the real
-- plugins (fp32, single, sgd) must bring its loss well below where it started.
local lamp = require "lamp"
local nn = lamp.nn

local train = lamp.data.idx("fashion-mnist", "train"):subset(1, 2000)
local test = lamp.data.idx("fashion-mnist", "t10k"):subset(1, 1000)
local loader = lamp.data.loader(train, { batch = 50, shuffle = true, seed = 7 })
local test_loader = lamp.data.loader(test, { batch = 500 })

local epochs = 6
local trainer = lamp.Trainer {
  model = nn.Sequential { nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10) },
  loss = nn.CrossEntropy(),
  precision = lamp.precision("fp32"),
  comm = lamp.comm("single"),
  optim = lamp.optim("sgd", { lr = 0.05, momentum = 0.9 }),
  schedule = lamp.lr.cosine { total = loader:batches() * epochs },
  seed = 3,
}

local first, last
for e = 1, epochs do
  local r = trainer:epoch(loader)
  first = first or r.loss
  last = r.loss
end
local eval = trainer:evaluate(test_loader)
local stats = trainer:stats()
print(string.format("first epoch loss %.4f, last %.4f, held-out accuracy %.3f, %d steps",
  first, last, eval.accuracy, stats.steps))

assert(first > 0.6, "the first epoch should start from an untrained model, loss " .. first)
assert(last < 0.35, "the loss must fall below 0.35 on the training subset, got " .. last)
assert(last < 0.5 * first, "the loss must at least halve")
assert(eval.accuracy > 0.75, "held-out accuracy must pass 75 %, got " .. eval.accuracy)
assert(stats.steps == loader:batches() * epochs, "one optimizer step per batch")
assert(stats.skipped_steps == 0, "fp32 never skips")
assert(stats.effective_batch == 50, "B_eff = 50 x 1 x 1")
assert(math.abs(stats.lr) < 1e-3, "the cosine schedule ends near 0, lr " .. stats.lr)

local mem = lamp.memory()
local numel = 784 * 128 + 128 + 128 * 10 + 10
assert(mem.params.current == numel * 4, "params are in the ledger")
assert(mem.grads.current == numel * 4, "grads are in the ledger")
assert(mem.optim_state.current == numel * 4, "the momentum buffer is in the ledger")
assert(mem.activations.peak > 0, "activations are in the ledger")
print("ok")
