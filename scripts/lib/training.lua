-- What the training scripts share (require "training" after adding scripts/lib to
-- package.path): the optimizer from --optim/--lr/--wd/--momentum, the per-rank batch, the epoch
-- loop with --save/--save_every/--keep/--resume/--start_over, and the memory ledger table.
local M = {}

-- adam/adamw: lr 1e-3, weight decay 0.01 unless given; sgd: lr `sgd_lr` (0.05) with momentum; any
-- other (a third-party plugin, by name or path): its own defaults, --lr and --wd only where given.
function M.optimizer(lamp, args, sgd_lr)
  local name = args.optim
  local adam = name == "adam" or name == "adamw"
  local lr = args.lr == "auto" and (adam and 1e-3 or sgd_lr or 0.05) or args.lr
  local wd = args.wd == "auto" and (adam and 0.01 or 0) or args.wd
  if adam then return lamp.optim(name, { lr = lr, weight_decay = wd }) end
  if name == "sgd" then return lamp.optim(name, { lr = lr, momentum = args.momentum, weight_decay = wd }) end
  local opts = {}
  if args.lr ~= "auto" then opts.lr = args.lr end
  if args.wd ~= "auto" then opts.weight_decay = args.wd end
  return lamp.optim(name, opts)
end

-- A whole number >= min from the command line, else an error naming the argument and what was given.
local function count_argument(name, value, min, meaning)
  local n = type(value) == "number" and math.tointeger(value) or nil
  if n == nil or n < min then
    error(string.format("--%s must be a whole number >= %d%s, got %s", name, min, meaning or "", tostring(value)), 0)
  end
  return n
end

-- A flag given as --name (true) or left out (false); --name=VALUE is an error.
function M.flag(args, name)
  local v = args[name]
  if type(v) ~= "boolean" then error(string.format("--%s takes no value, got --%s=%s", name, name, tostring(v)), 0) end
  return v
end

-- --limit=N trains on the first N samples of the data set (0: all of them).
function M.limit(dataset, limit)
  local n = count_argument("limit", limit, 0, " (0: the whole data set)")
  if n == 0 then return dataset end
  return dataset:subset(1, math.min(n, dataset:size()))
end

-- --batch is the global batch: each of the ranks takes an equal share.
function M.rank_batch(batch, comm)
  local world = comm:size()
  batch = count_argument("batch", batch, 1)
  if batch % world ~= 0 then
    error(string.format("--batch=%d (the global batch) must be a multiple of the %d ranks", batch, world), 0)
  end
  return batch // world
end

-- A fresh run may save only into a folder without complete checkpoints: one holding another
-- run's is refused here, before any training, rather than by the trainer at the first save. A
-- run that resumed continues the run it resumed (the trainer checks the folder it saves into),
-- and --start_over moves the old checkpoints into DIR/previous-<n> at the first save.
local function check_save_folder(lamp, args, resumed)
  if args.start_over ~= nil and type(args.start_over) ~= "boolean" then
    error("--start_over takes no value, got --start_over=" .. tostring(args.start_over), 0)
  end
  if args.save == "" or args.start_over or resumed then return end
  -- A folder whose checkpoints are all damaged raises in latest(): none of them counts here.
  local ok, path, step = pcall(lamp.checkpoint.latest, args.save)
  if ok and path then
    error(string.format("cannot save into %s: it holds checkpoints of another run (newest: step %d); " ..
      "resume from it (--resume=%s) or start over (--start_over)", args.save, step, args.save), 0)
  end
end

-- --zero=1 shards the optimizer state and the fp32 master weights over the ranks (the Trainer's
-- shard_optimizer, ZeRO stage 1); --zero=0, the default, keeps them whole on every rank.
function M.shard_optimizer(args)
  local z = args.zero
  if z ~= 0 and z ~= 1 then error("--zero must be 0 (no sharding) or 1 (optimizer state and masters), got " .. tostring(z), 0) end
  return z == 1
end

-- --metrics=FILE: the Trainer's metrics file (JSON Lines, docs/metrics.md); nil when not given.
function M.metrics(args)
  local file = args.metrics
  if file == "" or file == nil then return nil end
  if type(file) == "boolean" then error("--metrics needs a file name: --metrics=FILE", 0) end
  return tostring(file)
end

-- Resumes if asked, then trains until args.epochs epochs are done, saving into args.save (if
-- set) every args.save_every optimizer steps and at the end of every epoch, evaluating and
-- logging after every epoch. Returns the last evaluation. An epoch is evaluated before it is
-- saved, so that its metrics record (written at the latest by the save) has the test numbers.
function M.run(lamp, trainer, loader, test_loader, args)
  local resumed
  if args.resume ~= "" then
    resumed = trainer:resume(args.resume)
    lamp.log0(resumed and ("resumed from " .. resumed) or ("no checkpoint in " .. args.resume .. ": starting afresh"))
  end
  check_save_folder(lamp, args, resumed)
  local last
  while trainer:stats().epochs < args.epochs do
    local epoch = trainer:stats().epochs + 1
    local r = trainer:epoch(loader, { max_steps = args.save ~= "" and args.save_every or 0 })
    -- The ledger before anything is evaluated: its peaks are those of training alone (an evaluation
    -- runs larger batches without gradients, a peak of its own).
    M.training_memory = M.training_memory or lamp.memory()
    if r.done then
      last = trainer:evaluate(test_loader)
      lamp.log0(string.format("epoch %d  train loss %.4f  test loss %.4f  test accuracy %.2f %%  %.0f samples/s",
        epoch, r.loss, last.loss, 100 * last.accuracy, r.samples_per_s))
    end
    if args.save ~= "" then trainer:save { dir = args.save, keep = args.keep, start_over = args.start_over } end
  end
  return last or trainer:evaluate(test_loader)
end

-- The memory ledger, current and peak MiB per category, and the activation peak of training alone
-- (call on one rank).
function M.print_memory(lamp)
  local mem = lamp.memory()
  print("memory (MiB)        current      peak")
  for _, k in ipairs { "params", "grads", "master", "optim_state", "activations", "workspace", "data", "total" } do
    print(string.format("  %-14s %9.2f %9.2f", k, mem[k].current / 1048576, mem[k].peak / 1048576))
  end
  if M.training_memory then
    print(string.format("activation peak while training, before the first evaluation: %d bytes",
      M.training_memory.activations.peak))
  end
end

return M
