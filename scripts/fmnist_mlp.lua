-- Trains an MLP on Fashion-MNIST and reports test accuracy and the memory ledger.
--
--   build/lamp scripts/fmnist_mlp.lua [--epochs=1] [--batch=128] [--lr=0.05] [--momentum=0.9]
--       [--hidden=1024,1024] [--seed=0] [--precision=fp32] [--comm=single] [--optim=sgd]
--       [--schedule=cosine|constant] [--data=fashion-mnist] [--limit=N]
--
-- The default recipe is the reference one (PyTorch reaches 86.45-86.75 % after one epoch):
-- 784-1024-1024-10, SGD lr 0.05 momentum 0.9, batch 128, learning rate falling to 0 along a
-- cosine over the run.
local lamp = require "lamp"
local nn = lamp.nn

local args = lamp.parse_args(arg, {
  epochs = 1, batch = 128, lr = 0.05, momentum = 0.9, hidden = "1024,1024", seed = 0,
  precision = "fp32", comm = "single", optim = "sgd", schedule = "cosine",
  data = "fashion-mnist", limit = 0,
})

local function hidden_sizes(spec)
  local sizes = {}
  for n in tostring(spec):gmatch("[^,]+") do
    local v = math.tointeger(tonumber(n))
    if not v or v <= 0 then error("--hidden: expected positive integers separated by commas, got " .. tostring(spec), 0) end
    sizes[#sizes + 1] = v
  end
  return sizes
end

local comm = lamp.comm(args.comm)
local precision = lamp.precision(args.precision)
local optim = lamp.optim(args.optim, { lr = args.lr, momentum = args.momentum })

local train = lamp.data.idx(args.data, "train")
local test = lamp.data.idx(args.data, "t10k")
if args.limit > 0 then train = train:subset(1, math.min(args.limit, train:size())) end

local loader = lamp.data.loader(train, { batch = args.batch, shuffle = true, drop_last = true,
                                         seed = args.seed, comm = comm })
local test_loader = lamp.data.loader(test, { batch = 1000 })

local layers, width = {}, 784
for _, h in ipairs(hidden_sizes(args.hidden)) do
  layers[#layers + 1] = nn.Linear(width, h)
  layers[#layers + 1] = nn.ReLU()
  width = h
end
layers[#layers + 1] = nn.Linear(width, train:classes())
local model = nn.Sequential(layers)

local total_steps = loader:batches() * args.epochs
local schedule = args.schedule == "cosine" and lamp.lr.cosine { total = total_steps } or lamp.lr.constant()
local trainer = lamp.Trainer { model = model, loss = nn.CrossEntropy(), precision = precision, comm = comm,
                               optim = optim, schedule = schedule, seed = args.seed }

local rank0 = comm:rank() == 0
if rank0 then
  print(tostring(model))
  print(string.format("%d parameters, %d training samples, batch %d, %d steps, %s %s %s",
    trainer:parameters(), train:size(), args.batch, total_steps, precision:name(), comm:name(), optim:name()))
end

local last
for epoch = 1, args.epochs do
  local r = trainer:epoch(loader)
  local e = trainer:evaluate(test_loader)
  last = e
  if rank0 then
    print(string.format("epoch %d  train loss %.4f  test loss %.4f  test accuracy %.2f %%  %.0f samples/s",
      epoch, r.loss, e.loss, 100 * e.accuracy, r.samples_per_s))
  end
end

if rank0 then
  local mem = lamp.memory()
  local function mib(b) return string.format("%9.2f", b / 1048576) end
  print("memory (MiB)        current      peak")
  for _, k in ipairs { "params", "grads", "master", "optim_state", "activations", "workspace", "data", "total" } do
    print(string.format("  %-14s %s %s", k, mib(mem[k].current), mib(mem[k].peak)))
  end
  print(string.format("final test accuracy %.2f %%", 100 * last.accuracy))
end
