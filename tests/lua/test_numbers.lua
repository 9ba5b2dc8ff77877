-- Numbers from Lua are judged as the user gave them: range-checked
-- before any narrowing, booleans refused where a number is wanted, an unknown plugin option
-- reported as unknown whatever its value, each message showing the value given; an epoch
-- without a batch, endless skipped steps and a model larger than the machine are errors.
local lamp = require "lamp"
local nn = lamp.nn

local function expect_error(fn, expected)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error containing: " .. expected)
  err = tostring(err)
  if not err:find(expected, 1, true) then
    error(string.format("error message mismatch\n  expected to contain: %s\n  got: %s", expected, err), 2)
  end
end

local comm = lamp.comm("single")
local function trainer_with(changes)
  local t = { model = nn.Sequential { nn.Flatten(), nn.Linear(784, 10) }, loss = nn.CrossEntropy(),
              precision = lamp.precision("fp32"), comm = comm, optim = lamp.optim("sgd", { lr = 0.05 }) }
  for k, v in pairs(changes) do t[k] = v end
  return lamp.Trainer(t)
end

-- Trainer fields: 2^32 + 1 no longer wraps to 1, and the message shows what was given.
expect_error(function() trainer_with { accum = 2 ^ 32 + 1 } end, "Trainer: 'accum' must be an integer in [1, 65536], got 4294967297")
expect_error(function() trainer_with { accum = 4294967297 } end, "Trainer: 'accum' must be an integer in [1, 65536], got 4294967297")
expect_error(function() trainer_with { accum = 0 } end, "Trainer: 'accum' must be an integer in [1, 65536], got 0")
expect_error(function() trainer_with { accum = true } end, "Trainer: 'accum' must be an integer in [1, 65536], got true")
expect_error(function() trainer_with { accum = 1.5 } end, "Trainer: 'accum' must be an integer in [1, 65536], got 1.5")
expect_error(function() trainer_with { accum = "2" } end, "Trainer: 'accum' must be an integer in [1, 65536], got the string \"2\"")
expect_error(function() trainer_with { seed = -1 } end, "Trainer: 'seed' must be an integer in [0, 9223372036854775807], got -1")
expect_error(function() trainer_with { seed = 1e20 } end, "Trainer: 'seed' must be an integer in [0, 9223372036854775807], got 1e+20")
expect_error(function() trainer_with { max_skipped = -1 } end,
  "Trainer: 'max_skipped' must be an integer in [0, 9223372036854775807], got -1")
expect_error(function() trainer_with { clip = true } end, "Trainer: 'clip' must be a number, got true")
assert(trainer_with { accum = 2.0 }:stats().steps == 0) -- an integral float is an integer

-- Plugin options: booleans only for flags, unknown names first, values as given.
expect_error(function() lamp.optim("sgd", { lr = true }) end, "sgd: option 'lr' must be a number in [0, 1e+06], got true")
expect_error(function() lamp.optim("sgd", { lr = "fast" }) end,
  "sgd: option 'lr' must be a number in [0, 1e+06], got the string \"fast\"")
expect_error(function() lamp.optim("adam", { betas = { 0.9, 0.99 } }) end,
  "adam: unknown option 'betas'; valid options: lr, beta1, beta2, eps, weight_decay, amsgrad")
expect_error(function() lamp.optim("sgd", { lr = 4294967297 }) end, "sgd: option 'lr' must be in [0, 1e+06], got 4294967297")
expect_error(function() lamp.optim("sgd", { 0.1 }) end, "sgd: option names must be strings, got 1")
expect_error(function() lamp.optim("sgd", 0.1) end, "sgd: options must be a table {name = value, ...}, got number")
expect_error(function() lamp.precision("fp16", { dynamic = "no" }) end,
  "fp16: option 'dynamic' must be true, false, 0 or 1, got the string \"no\"")
expect_error(function() lamp.comm("auto", { bogus = {} }) end, "single: unknown option 'bogus'; valid options: timeout")
assert(lamp.optim("sgd", { momentum = 0.9, nesterov = true }):get("nesterov") == 1)
assert(lamp.optim("adam", { amsgrad = false }):get("amsgrad") == 0)
assert(lamp.precision("fp16", { dynamic = false }):name() == "fp16")

-- Layer arguments.
expect_error(function() nn.Linear(1.5, 2) end, "nn.Linear: in_features must be a positive integer, got 1.5")
expect_error(function() nn.Linear(-2 ^ 32, 2) end, "nn.Linear: in_features must be a positive integer, got -4294967296")
expect_error(function() nn.Linear(4, true) end, "nn.Linear: out_features must be a positive integer, got true")
expect_error(function() nn.Conv2d(1, 1, 3, { stride = -2 ^ 32 }) end, "nn.Conv2d: 'stride' must be positive, got -4294967296")
expect_error(function() nn.Conv2d(1, 1, 3, { padding = 0.5 }) end, "nn.Conv2d: 'padding' must be an integer, got 0.5")
expect_error(function() nn.BatchNorm2d(4, { momentum = 2 }) end, "nn.BatchNorm2d: 'momentum' must be in (0, 1], got 2")
expect_error(function() nn.Dropout(1.5) end, "nn.Dropout: p must be a number in [0, 1), got 1.5")
expect_error(function() nn.Dropout(true) end, "nn.Dropout: p must be a number in [0, 1), got true")

-- Loader, data set and schedule arguments show the value given, not a wrapped int.
local small = lamp.data.idx("fashion-mnist", "t10k")
expect_error(function() lamp.data.loader(small, { batch = -2 ^ 32 }) end, "data.loader: 'batch' must be positive, got -4294967296")
expect_error(function() lamp.data.loader(small, { seed = -1 }) end,
  "data.loader: 'seed' must be an integer in [0, 9223372036854775807], got -1")
expect_error(function() lamp.data.loader(small, { augment = { crop_pad = 2 ^ 32 } }) end,
  "data.loader: augment 'crop_pad' must be in [0, 1024], got 4294967296")
expect_error(function() small:subset(2 ^ 32, 1) end, "Dataset:subset: 1 samples from sample 4294967296 do not fit in samples 1 to 10000")
expect_error(function() small:subset(1, math.maxinteger) end,
  "Dataset:subset: 9223372036854775807 samples from sample 1 do not fit in samples 1 to 10000")
expect_error(function() lamp.data.loader(small):start(-2 ^ 32) end, "Loader:start: epoch must be >= 0, got -4294967296")
expect_error(function() lamp.lr.cosine { total = -2 ^ 32 } end, "lr.cosine: 'total' (optimizer steps) must be positive, got -4294967296")
expect_error(function() lamp.lr.warmup_cosine { total = 10, warmup = -2 ^ 32 } end,
  "lr.warmup_cosine: 'warmup' must be a number of steps >= 0, got -4294967296")
expect_error(function() lamp.lr.at("constant", 0.1, -2 ^ 32) end, "lr.at: step must be >= 0, got -4294967296")

-- An epoch without a batch is an error naming the loader's size and batch, not a loss of 0.
local train = lamp.data.idx("fashion-mnist", "train")
local ten = train:subset(1, 10)
local t = trainer_with {}
expect_error(function() t:epoch(lamp.data.loader(ten, { batch = 16, drop_last = true })) end,
  "has no batch in an epoch: 10 samples per rank (10 in the data set, 1 rank) and batch 16 with drop_last; use a batch of at most 10 or more samples")
assert(t:stats().epochs == 0)

-- A static fp16 scale that always overflows: each epoch says how many steps it skipped, and
-- max_skipped in a row stop the run (0: no limit).
local overflowing = lamp.precision("fp16", { dynamic = false, init_scale = 1e30 })
local sixty_four = train:subset(1, 64)
local skipping = trainer_with { precision = overflowing, max_skipped = 0 }
local r = skipping:epoch(lamp.data.loader(sixty_four, { batch = 4 }))
assert(r.done and r.steps == 16 and r.skipped == 16, string.format("steps %d, skipped %d", r.steps, r.skipped))
assert(skipping:stats().skipped_in_a_row == 16)
skipping:close()
local limited = trainer_with { precision = overflowing, max_skipped = 3 }
expect_error(function() limited:epoch(lamp.data.loader(sixty_four, { batch = 4 })) end,
  "Trainer: 3 optimizer steps in a row skipped for inf/NaN gradients (precision 'fp16', loss scale 1e+30); training makes no progress")
limited:close()

-- A model larger than the machine is refused before any allocation, naming its layer.
expect_error(function() trainer_with { model = nn.Linear(1e9, 1e9) } end,
  "model: a model of 1000000001000000000 parameters and 0 buffer values (its largest layer, Linear(1000000000 -> 1000000000), has 1000000001000000000) needs 8000000008000000000 bytes, more than this machine's ")

-- The training scripts refuse a negative or non-numeric --limit instead of training on everything.
-- The shell io.popen starts is a child of this lamp process: $PPID names the executable.
local function run_script(script, args)
  local p = assert(io.popen(string.format('"$(readlink /proc/$PPID/exe)" scripts/%s %s 2>&1', script, args)))
  local out = p:read("a")
  local _, _, code = p:close()
  return code, out
end
for _, script in ipairs { "fmnist_mlp.lua", "fmnist_resnet.lua", "precision_tour.lua" } do
  for given, shown in pairs { ["--limit=-5"] = "-5", ["--limit=many"] = "many", ["--limit=2.5"] = "2.5" } do
    local code, out = run_script(script, given)
    assert(code == 1 and out:find("lamp: --limit must be a whole number >= 0 (0: the whole data set), got " .. shown .. "\n", 1, true),
      string.format("%s %s: exit %s\n%s", script, given, tostring(code), out))
  end
end
local code, out = run_script("fmnist_mlp.lua", "--batch=-128")
assert(code == 1 and out:find("lamp: --batch must be a whole number >= 1, got -128\n", 1, true), out)
-- --recompute is a flag: a value is refused, whatever it is.
code, out = run_script("fmnist_resnet.lua", "--recompute=2")
assert(code == 1 and out:find("lamp: --recompute takes no value, got --recompute=2\n", 1, true), out)

print("numbers: ok")
