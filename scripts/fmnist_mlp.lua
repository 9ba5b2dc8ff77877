-- Trains an MLP on Fashion-MNIST and reports test accuracy and the memory ledger.
--
--   build/lamp scripts/fmnist_mlp.lua [--epochs=1] [--batch=128] [--hidden=1024,1024] [--seed=0]
--       [--precision=fp32|fp16|bf16] [--comm=auto] [--optim=sgd|adam|adamw] [--lr=] [--momentum=0.9]
--       [--wd=] [--accum=1] [--clip=0] [--schedule=cosine|warmup_cosine|step|constant] [--warmup=0]
--       [--data=fashion-mnist] [--limit=N] [--bucket_mb=25] [--compress=none|bf16|fp16]
--
-- The default recipe is the reference one (PyTorch reaches 86.45-86.75 % after one epoch):
-- 784-1024-1024-10, SGD lr 0.05 momentum 0.9, batch 128, learning rate falling to 0 along a
-- cosine over the run. adam and adamw default to lr 1e-3 and weight decay 0.01.
--
-- --batch is the global batch: under scripts/lamp-run -n N each rank takes batch/N samples a step
-- from its own shard (comm "auto" picks mpi under mpirun, single otherwise).
local lamp = require "lamp"
local nn = lamp.nn

local args = lamp.parse_args(arg, {
  epochs = 1, batch = 128, lr = "auto", momentum = 0.9, wd = "auto", hidden = "1024,1024", seed = 0,
  precision = "fp32", comm = "auto", optim = "sgd", schedule = "cosine", warmup = 0, accum = 1, clip = 0,
  data = "fashion-mnist", limit = 0, bucket_mb = 25, compress = "none",
})

local function optimizer(name)
  local adam = name == "adam" or name == "adamw"
  local lr = args.lr == "auto" and (adam and 1e-3 or 0.05) or args.lr
  local wd = args.wd == "auto" and (adam and 0.01 or 0) or args.wd
  if adam then return lamp.optim(name, { lr = lr, weight_decay = wd }) end
  if name == "sgd" then return lamp.optim(name, { lr = lr, momentum = args.momentum, weight_decay = wd }) end
  return lamp.optim(name, { lr = lr }) -- a third-party optimizer: only lr is assumed
end

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
local optim = optimizer(args.optim)

local train = lamp.data.idx(args.data, "train")
local test = lamp.data.idx(args.data, "t10k")
if args.limit > 0 then train = train:subset(1, math.min(args.limit, train:size())) end

local world = comm:size()
if args.batch % world ~= 0 then
  error(string.format("--batch=%d (the global batch) must be a multiple of the %d ranks", args.batch, world), 0)
end
local loader = lamp.data.loader(train, { batch = args.batch // world, shuffle = true, drop_last = true,
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

local total_steps = loader:batches() * args.epochs // args.accum
local schedules = {
  cosine = function() return lamp.lr.cosine { total = total_steps } end,
  warmup_cosine = function() return lamp.lr.warmup_cosine { warmup = args.warmup, total = total_steps } end,
  step = function() return lamp.lr.step { step_size = math.max(1, total_steps // 3), gamma = 0.1 } end,
  constant = function() return lamp.lr.constant() end,
}
if not schedules[args.schedule] then
  error("--schedule: expected cosine, warmup_cosine, step or constant, got " .. tostring(args.schedule), 0)
end
local trainer = lamp.Trainer { model = model, loss = nn.CrossEntropy(), precision = precision, comm = comm,
                               optim = optim, schedule = schedules[args.schedule](), seed = args.seed,
                               accum = args.accum, clip = args.clip, bucket_mb = args.bucket_mb,
                               compress = args.compress }

lamp.log0(tostring(model))
lamp.log0(string.format("%d parameters, %d training samples, batch %d x accum %d, %d optimizer steps, %s %s %s",
    trainer:parameters(), train:size(), args.batch, args.accum, total_steps, precision:name(), comm:name(),
    optim:name()))

local last
for epoch = 1, args.epochs do
  local r = trainer:epoch(loader)
  local e = trainer:evaluate(test_loader)
  last = e
  lamp.log0(string.format("epoch %d  train loss %.4f  test loss %.4f  test accuracy %.2f %%  %.0f samples/s",
    epoch, r.loss, e.loss, 100 * e.accuracy, r.samples_per_s))
end

if comm:rank() == 0 then
  local mem = lamp.memory()
  local function mib(b) return string.format("%9.2f", b / 1048576) end
  print("memory (MiB)        current      peak")
  for _, k in ipairs { "params", "grads", "master", "optim_state", "activations", "workspace", "data", "total" } do
    print(string.format("  %-14s %s %s", k, mib(mem[k].current), mib(mem[k].peak)))
  end
  print(string.format("final test accuracy %.2f %%", 100 * last.accuracy))
end
