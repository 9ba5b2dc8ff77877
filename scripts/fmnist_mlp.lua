-- Trains an MLP on Fashion-MNIST and reports test accuracy and the memory ledger.
--
--   build/lamp scripts/fmnist_mlp.lua [--epochs=1] [--batch=128] [--hidden=1024,1024] [--seed=0]
--       [--precision=fp32|fp16|bf16] [--comm=auto] [--optim=sgd|adam|adamw] [--lr=] [--momentum=0.9]
--       [--wd=] [--accum=1] [--clip=0] [--schedule=cosine|warmup_cosine|step|constant] [--warmup=0]
--       [--data=fashion-mnist] [--limit=N] [--bucket_mb=25] [--compress=none|bf16|fp16]
--       [--save=DIR] [--save_every=STEPS] [--keep=3] [--resume=DIR] [--start_over] [--device=cpu]
--       [--metrics=FILE] [--master_weights=true|false] [--stochastic_rounding] [--zero=0|1]
--
-- --master_weights and --stochastic_rounding set the fp16/bf16 precision options of those names:
-- --precision=bf16 --master_weights=false rounds every update into the bf16 weights, to nearest
-- unless --stochastic_rounding.
--
-- --save=DIR writes a checkpoint into DIR at the end of every epoch (and every --save_every
-- optimizer steps), keeping the --keep newest of this run (another run's are never deleted).
-- --resume=DIR continues from DIR's newest complete checkpoint, mid-epoch if it was taken there,
-- to the same bits as a run never stopped; a missing or empty DIR starts afresh, one whose
-- checkpoints are all damaged is refused. Both may name the same folder. A fresh run refuses a
-- --save folder that holds another run's checkpoints unless --start_over, which moves them
-- into DIR/previous-<n> (nothing is deleted; that folder can be resumed from).
-- --metrics=FILE records every optimizer step and epoch in FILE as JSON Lines (docs/metrics.md;
-- draw it with build/lamp plot FILE -o run.png): a fresh run starts FILE afresh, a resumed one
-- continues it.
-- The default recipe is the reference one (PyTorch reaches 86.45-86.75 % after one epoch):
-- 784-1024-1024-10, SGD lr 0.05 momentum 0.9, batch 128, learning rate falling to 0 along a
-- cosine over the run. adam and adamw default to lr 1e-3 and weight decay 0.01. --precision, --comm
-- and --optim also take a plugin's path (./lion.so) or a name found on LAMP_PLUGIN_PATH; such an
-- optimizer keeps its own defaults unless --lr or --wd is given.
--
-- --zero=1 shards the optimizer state and fp32 master weights over the ranks (ZeRO-1, the
-- Trainer's shard_optimizer; docs/ddp.md); with one rank it changes nothing.
--
-- --batch is the global batch: under scripts/lamp-run -n N each rank takes batch/N samples a step
-- from its own shard (comm "auto" picks mpi under mpirun, single otherwise).
package.path = arg[0]:gsub("[^/]*$", "") .. "lib/?.lua;" .. package.path
local lamp = require "lamp"
local training = require "training"
local nn = lamp.nn

local args = lamp.parse_args(arg, {
  epochs = 1, batch = 128, lr = "auto", momentum = 0.9, wd = "auto", hidden = "1024,1024", seed = 0,
  precision = "fp32", comm = "auto", optim = "sgd", schedule = "cosine", warmup = 0, accum = 1, clip = 0,
  data = "fashion-mnist", limit = 0, bucket_mb = 25, compress = "none",
  save = "", save_every = 0, keep = 3, resume = "", start_over = false, device = "cpu", metrics = "",
  master_weights = "policy", stochastic_rounding = false, zero = 0,
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

lamp.device(args.device) -- before the communicator: "auto" asks the plugins, which see the run device
local comm = lamp.comm(args.comm)
local precision_opts = {}
if args.master_weights ~= "policy" then precision_opts.master_weights = args.master_weights end
if args.stochastic_rounding then precision_opts.stochastic_rounding = true end
local precision = lamp.precision(args.precision, precision_opts)
local optim = training.optimizer(lamp, args)

local train = lamp.data.idx(args.data, "train")
local test = lamp.data.idx(args.data, "t10k")
train = training.limit(train, args.limit)

local loader = lamp.data.loader(train, { batch = training.rank_batch(args.batch, comm), shuffle = true, drop_last = true,
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
                               compress = args.compress, metrics = training.metrics(args),
                               shard_optimizer = training.shard_optimizer(args) }

lamp.log0(tostring(model))
lamp.log0(string.format("%d parameters, %d training samples, batch %d x accum %d, %d optimizer steps, %s %s %s",
    trainer:parameters(), train:size(), args.batch, args.accum, total_steps, precision:name(), comm:name(),
    optim:name()))

local last = training.run(lamp, trainer, loader, test_loader, args)

if comm:rank() == 0 then
  training.print_memory(lamp)
  print(string.format("final test accuracy %.2f %%", 100 * last.accuracy))
end
