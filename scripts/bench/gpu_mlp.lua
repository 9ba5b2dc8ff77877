-- Throughput of an MLP training step on one device, for the GPU check's side-by-side with PyTorch
-- (scripts/bench/torch_gpu_mlp.py is the PyTorch twin): times `steps` optimizer steps after `warmup`
-- untimed ones and prints one line "gpu_mlp: ... samples/s N".
--
--   build/lamp scripts/bench/gpu_mlp.lua [--device=cuda] [--precision=fp32|fp16|bf16] [--model=mlp|resnet]
--       [--hidden=1024,1024] [--batch=128] [--steps=200] [--warmup=20] [--seed=0] [--graphs=auto|on|off]
--
-- --graphs=off runs every micro-step eagerly; the default records them as device graphs where the
-- device can (cuda) and replays them, and the line says how many were recorded and replayed.
-- --model=resnet times the small ResNet of scripts/lib/resnet.lua instead (--hidden is then unused);
-- its twin is torch_gpu_mlp.py --model resnet.
--
-- The models: the reference MLP (784-1024-1024-10, batch 128) and the GEMM-bound one
-- (--hidden=4096,4096 --batch=4096). SGD with momentum 0.9 at a constant lr 0.05, cross-entropy,
-- Fashion-MNIST batches from the loader (uploaded through the device's queue every step; the
-- twin keeps synthetic batches on the GPU, which can only favour PyTorch). The time is the
-- trainer's own for the steps (trainer:epoch's `seconds`), which ends with each step's one
-- synchronisation, so no queued work is left out.
local lamp = require "lamp"
local nn = lamp.nn

local args = lamp.parse_args(arg, {
  device = "cuda", precision = "fp32", model = "mlp", hidden = "1024,1024", batch = 128, steps = 200, warmup = 20,
  seed = 0, graphs = "auto",
})
local graphs = ({ auto = nil, on = true, off = false })[args.graphs]
if args.graphs ~= "auto" and graphs == nil then error("--graphs: expected auto, on or off, got " .. tostring(args.graphs), 0) end
if args.model ~= "mlp" and args.model ~= "resnet" then
  error("--model: expected mlp or resnet, got " .. tostring(args.model), 0)
end

local function whole(name, v, min)
  local n = math.tointeger(v)
  if not n or n < min then error(string.format("--%s must be a whole number >= %d, got %s", name, min, tostring(v)), 0) end
  return n
end
local batch, steps, warmup = whole("batch", args.batch, 1), whole("steps", args.steps, 1), whole("warmup", args.warmup, 0)

local sizes = {}
for n in tostring(args.hidden):gmatch("[^,]+") do sizes[#sizes + 1] = whole("hidden", tonumber(n), 1) end

lamp.device(args.device)
local train = lamp.data.idx("fashion-mnist", "train")
local loader = lamp.data.loader(train, { batch = batch, shuffle = true, drop_last = true, seed = args.seed })

-- The MLP 784-hidden...-10, or the training scripts' small ResNet (scripts/lib/resnet.lua).
local function build()
  if args.model == "resnet" then
    package.path = arg[0]:gsub("[^/]*$", "") .. "../lib/?.lua;" .. package.path
    return require("resnet").build(nn, 1, 10)
  end
  local layers, width = {}, 784
  for _, h in ipairs(sizes) do
    layers[#layers + 1] = nn.Linear(width, h)
    layers[#layers + 1] = nn.ReLU()
    width = h
  end
  layers[#layers + 1] = nn.Linear(width, 10)
  return nn.Sequential(layers)
end

local trainer = lamp.Trainer {
  model = build(), loss = nn.CrossEntropy(), precision = lamp.precision(args.precision),
  comm = lamp.comm("single"), optim = lamp.optim("sgd", { lr = 0.05, momentum = 0.9 }),
  schedule = lamp.lr.constant(), seed = args.seed, graphs = graphs,
}

-- Runs n steps, across epoch ends; returns samples, seconds and the last loss.
local function run_steps(n)
  local samples, seconds, loss = 0, 0.0, nil
  while n > 0 do
    local r = trainer:epoch(loader, { max_steps = n })
    if r.steps == 0 and not r.done then error("gpu_mlp: the trainer made no step", 0) end
    samples, seconds, loss, n = samples + r.samples, seconds + r.seconds, r.loss, n - r.steps
  end
  return samples, seconds, loss
end

if warmup > 0 then run_steps(warmup) end
local samples, seconds, loss = run_steps(steps)
local stats = trainer:stats()
local what = args.model == "resnet" and "resnet" or "mlp 784-" .. table.concat(sizes, "-") .. "-10"
print(string.format("gpu_mlp: device %s precision %s %s batch %d: %d steps, %.3f s, loss %.6f, " ..
  "skipped %d, scale %g, graphs %s (%d recorded, %d replayed), samples/s %.0f", args.device, args.precision, what,
  batch, steps, seconds, loss, stats.skipped_steps, stats.loss_scale, stats.graphs and "on" or "off",
  stats.graph_records, stats.graph_replays, samples / seconds))
