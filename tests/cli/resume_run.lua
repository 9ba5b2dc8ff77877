-- A short training run for the resume tests (tests/cli/test_resume.sh, tests/mpi/test_resume.sh):
-- trains --steps optimizer steps on a Fashion-MNIST subset, optionally after resuming from
-- --resume, and saves the final state to --save. Two runs of 10 steps with a save and a resume
-- in between must leave a checkpoint byte-identical to one run of 20.
-- --device runs it on another device (the simulated one under build/tests/lamp-sim), --clip clips,
-- --net=resnet trains the small ResNet of scripts/lib (--recompute: its stages in nn.Recompute), and --graphs=on|off overrides the Trainer's
-- default for recording micro-steps as device graphs. --master_weights=false and
-- --stochastic_rounding set the fp16/bf16 plugins' options of those names; --zero=1 shards the
-- optimizer state over the ranks (the Trainer's shard_optimizer), --bucket_mb sizes the gradient
-- buckets.
package.path = arg[0]:gsub("[^/]*$", "") .. "../../scripts/lib/?.lua;" .. package.path
local lamp = require "lamp"
local nn = lamp.nn
local args = lamp.parse_args(arg, { precision = "fp32", optim = "sgd", accum = 1, steps = 20, save = "",
                                    resume = "", limit = 512, batch = 32, seed = 3, net = "mlp", device = "cpu",
                                    clip = 0, graphs = "auto", master_weights = "policy",
                                    stochastic_rounding = false, zero = 0, bucket_mb = 25, recompute = false })
local graphs = ({ auto = nil, on = true, off = false })[args.graphs]
assert(args.graphs == "auto" or graphs ~= nil, "--graphs must be auto, on or off")
lamp.device(args.device)

local comm = lamp.comm("auto")
-- fp16: a scale that overflows at once and grows every 3 clean steps, so the window of a
-- resume test sees the scale move both ways and the scaler's counters matter.
local prec_opts = args.precision == "fp16" and { init_scale = 2 ^ 24, growth_interval = 3 } or {}
if args.master_weights ~= "policy" then prec_opts.master_weights = args.master_weights end
if args.stochastic_rounding then prec_opts.stochastic_rounding = true end
local precision = lamp.precision(args.precision, prec_opts)
local optim = args.optim == "sgd" and lamp.optim("sgd", { lr = 0.05, momentum = 0.9, weight_decay = 1e-4 })
                                   or lamp.optim(args.optim, { lr = 2e-3, weight_decay = 0.01 })

local train = lamp.data.idx("fashion-mnist", "train"):subset(1, args.limit)
local loader = lamp.data.loader(train, { batch = args.batch // comm:size(), shuffle = true, drop_last = true,
                                         seed = args.seed, comm = comm })
local model
if args.net == "resnet" then
  model = require("resnet").build(nn, 1, 10, nil, args.recompute)
elseif args.net == "cnn" then
  model = nn.Sequential { nn.Conv2d(1, 8, 3, { padding = 1, bias = false }), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Dropout(0.1), nn.GlobalAvgPool(), nn.Flatten(), nn.Linear(8, 10) }
else
  model = nn.Sequential { nn.Linear(784, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 10) }
end
local trainer = lamp.Trainer { model = model, loss = nn.CrossEntropy(), precision = precision, comm = comm,
                               optim = optim, seed = args.seed, accum = args.accum, clip = args.clip,
                               schedule = lamp.lr.cosine { total = 40 }, graphs = graphs,
                               shard_optimizer = args.zero == 1, bucket_mb = args.bucket_mb }
if args.resume ~= "" then
  assert(trainer:resume(args.resume), "no checkpoint in " .. args.resume)
end
local function taken() local s = trainer:stats() return s.steps + s.skipped_steps end
local goal = taken() + args.steps
while taken() < goal do trainer:epoch(loader, { max_steps = goal - taken() }) end
if args.save ~= "" then trainer:save(args.save) end
local s = trainer:stats()
lamp.log0(string.format("steps %d skipped %d scale %g epochs %d", s.steps, s.skipped_steps, s.loss_scale, s.epochs))
lamp.log0(string.format("graphs %s: %d micro-steps recorded, %d replayed", s.graphs and "on" or "off",
                        s.graph_records, s.graph_replays))
lamp.log0(string.format("gradient buckets: %d", s.buckets))
