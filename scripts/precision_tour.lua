-- Trains the same networks under fp32, fp16 and bf16 (same seed, same data order) and prints
-- one table per network: test accuracy, samples/s, skipped steps, final loss scale, and the
-- memory ledger's peak bytes per category during training. The networks are the reference
-- MLP (784-1024-1024-10) and the small ResNet of scripts/lib/resnet.lua.
--
--   build/lamp scripts/precision_tour.lua [--nets=mlp,resnet] [--epochs=1] [--resnet_epochs=1]
--       [--batch=128] [--seed=0] [--hidden=1024,1024] [--policies=fp32,fp16,bf16] [--limit=N]
--       [--metrics=PREFIX]
--
-- --metrics=PREFIX records each run in PREFIX-<net>-<policy>.jsonl (PREFIX ending in '/': a folder,
-- PREFIX<net>-<policy>.jsonl), so that build/lamp plot PREFIX-mlp-*.jsonl -o mlp.png draws the
-- policies over one another (docs/metrics.md).
package.path = arg[0]:gsub("[^/]*$", "") .. "lib/?.lua;" .. package.path
local lamp = require "lamp"
local resnet = require "resnet"
local training = require "training"
local nn = lamp.nn

local args = lamp.parse_args(arg, { epochs = 1, resnet_epochs = 1, batch = 128, seed = 0, hidden = "1024,1024",
                                    policies = "fp32,fp16,bf16", nets = "mlp,resnet", limit = 0, lr = 0.05,
                                    metrics = "" })

local function list(spec)
  local out = {}
  for item in tostring(spec):gmatch("[^,]+") do out[#out + 1] = item end
  return out
end

local train = lamp.data.idx("fashion-mnist", "train")
train = training.limit(train, args.limit)
local test = lamp.data.idx("fashion-mnist", "t10k")
local comm = lamp.comm("single")

local function build_model(net)
  if net == "resnet" then return resnet.build(nn, 1, 10) end
  if net ~= "mlp" then error("--nets: expected mlp and/or resnet, got " .. tostring(net), 0) end
  local layers, width = {}, 784
  for _, h in ipairs(list(args.hidden)) do
    layers[#layers + 1] = nn.Linear(width, math.tointeger(tonumber(h)))
    layers[#layers + 1] = nn.ReLU()
    width = math.tointeger(tonumber(h))
  end
  layers[#layers + 1] = nn.Linear(width, 10)
  return nn.Sequential(layers)
end

-- The metrics file of one run, or nil without --metrics.
local function metrics_file(net, policy)
  local prefix = training.metrics(args)
  if prefix == nil then return nil end
  return string.format("%s%s%s-%s.jsonl", prefix, prefix:sub(-1) == "/" and "" or "-", net, policy)
end

local categories = { "params", "grads", "master", "optim_state", "activations", "workspace" }

local function run(net, policy, epochs)
  collectgarbage()
  local loader = lamp.data.loader(train, { batch = args.batch, shuffle = true, drop_last = true, seed = args.seed })
  local test_loader = lamp.data.loader(test, { batch = args.batch }) -- so eval does not set the peaks
  local before = lamp.memory()
  lamp.reset_memory_peaks()
  local trainer <close> = lamp.Trainer {
    model = build_model(net), loss = nn.CrossEntropy(), precision = lamp.precision(policy), comm = comm,
    optim = lamp.optim("sgd", { lr = args.lr, momentum = 0.9 }),
    schedule = lamp.lr.cosine { total = loader:batches() * epochs }, seed = args.seed,
    metrics = metrics_file(net, policy),
  }
  local samples, seconds = 0, 0
  for _ = 1, epochs do
    local r = trainer:epoch(loader)
    samples, seconds = samples + r.samples, seconds + r.seconds
  end
  local eval = trainer:evaluate(test_loader)
  local stats = trainer:stats()
  local mem = lamp.memory()
  local row = { policy = policy, accuracy = eval.accuracy, sps = samples / seconds,
                skipped = stats.skipped_steps, scale = stats.loss_scale, bytes = {} }
  local total = 0
  for _, k in ipairs(categories) do
    -- Peaks while this policy trained, net of what was held before it started (the data).
    row.bytes[k] = mem[k].peak - before[k].current
    total = total + row.bytes[k]
  end
  row.bytes.total = total
  return row
end

local function mib(b) return string.format("%8.2f", b / 1048576) end

local function report(net, epochs, rows)
  print(string.format("\n%s, %d epoch%s, batch %d", net, epochs, epochs == 1 and "" or "s", args.batch))
  print(string.format("%-6s %9s %10s %8s %8s | %8s %8s %8s %8s %8s %8s %8s", "policy", "test acc",
    "samples/s", "skipped", "scale", "params", "grads", "master", "optim", "activ", "work", "total"))
  print(string.rep("-", 6 + 9 + 10 + 8 + 8 + 4 + 7 * 9 + 1))
  for _, r in ipairs(rows) do
    print(string.format("%-6s %8.2f%% %10.0f %8d %8g | %s %s %s %s %s %s %s", r.policy, 100 * r.accuracy, r.sps,
      r.skipped, r.scale, mib(r.bytes.params), mib(r.bytes.grads), mib(r.bytes.master),
      mib(r.bytes.optim_state), mib(r.bytes.activations), mib(r.bytes.workspace), mib(r.bytes.total)))
  end
  print("(memory: peak MiB per ledger category while training; total = their sum)")
  local base = rows[1]
  for i = 2, #rows do
    local r = rows[i]
    print(string.format("%s vs %s: accuracy %+.2f points, speed %.2fx, activations %.0f %%, total memory %.0f %%",
      r.policy, base.policy, 100 * (r.accuracy - base.accuracy), r.sps / base.sps,
      100 * r.bytes.activations / base.bytes.activations, 100 * r.bytes.total / base.bytes.total))
  end
end

for _, net in ipairs(list(args.nets)) do
  local epochs = net == "resnet" and args.resnet_epochs or args.epochs
  local rows = {}
  for _, policy in ipairs(list(args.policies)) do rows[#rows + 1] = run(net, policy, epochs) end
  report(net, epochs, rows)
end
