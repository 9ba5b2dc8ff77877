-- fp16 and bf16 from Lua: options reach the plugin, training works under each policy, and the
-- scaler's state shows in trainer:stats().
local lamp = require "lamp"
local nn = lamp.nn

local function expect_error(fn, expected)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error containing: " .. expected)
  if not tostring(err):find(expected, 1, true) then
    error(string.format("error message mismatch\n  expected to contain: %s\n  got: %s", expected, tostring(err)), 2)
  end
end

expect_error(function() lamp.precision("fp16", { init_scal = 2 }) end,
  "fp16: unknown option 'init_scal'; valid options: init_scale, growth_factor, backoff_factor, growth_interval, hysteresis, min_scale, dynamic, master_weights, stochastic_rounding")
expect_error(function() lamp.precision("fp16", { growth_factor = 1 }) end,
  "fp16: option 'growth_factor' must be in (1, 65536], got 1")
expect_error(function() lamp.precision("fp16", { backoff_factor = 1 }) end,
  "fp16: option 'backoff_factor' must be in (0, 1), got 1")
expect_error(function() lamp.precision("fp16", { growth_interval = 0 }) end, "fp16: option 'growth_interval' must be in [1, 1e+09], got 0")
expect_error(function() lamp.precision("bf16", { init_scale = 2 }) end, "bf16: unknown option 'init_scale'; valid options: master_weights, stochastic_rounding")

local p16 = lamp.precision("fp16", { init_scale = 1024, growth_interval = 10, dynamic = true })
local policy = p16:policy()
assert(policy.weight_dtype == "f16" and policy.compute_dtype == "f16" and policy.activation_dtype == "f16")
assert(policy.accum_dtype == "f32" and policy.master_weights and policy.loss_scaling)
local b16 = lamp.precision("bf16")
policy = b16:policy()
assert(policy.weight_dtype == "bf16" and policy.master_weights and not policy.loss_scaling)
assert(not policy.stochastic_rounding)
expect_error(function() lamp.precision("bf16", { stochastic_rounding = 2 }) end,
  "bf16: option 'stochastic_rounding' must be in [0, 1], got 2")
expect_error(function() lamp.precision("bf16", { stochastic_rounding = 0.5 }) end,
  "bf16: option 'stochastic_rounding' must be a boolean (0 or 1), got 0.5")
local b16_sr = lamp.precision("bf16", { master_weights = false, stochastic_rounding = true })
policy = b16_sr:policy()
assert(policy.weight_dtype == "bf16" and not policy.master_weights and policy.stochastic_rounding)
assert(lamp.precision("fp16", { stochastic_rounding = true }):policy().stochastic_rounding)

local train = lamp.data.idx("fashion-mnist", "train"):subset(1, 1000)
local loader = lamp.data.loader(train, { batch = 50, shuffle = true, seed = 2 })
local function train_with(precision)
  local trainer <close> = lamp.Trainer {
    model = nn.Sequential { nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10) }, loss = nn.CrossEntropy(),
    precision = precision, comm = lamp.comm("single"), optim = lamp.optim("sgd", { lr = 0.05, momentum = 0.9 }),
    seed = 4,
  }
  local first = trainer:epoch(loader).loss
  local last
  for _ = 1, 3 do last = trainer:epoch(loader).loss end
  return first, last, trainer:stats()
end

local first, last, stats = train_with(p16)
print(string.format("fp16: loss %.4f -> %.4f, scale %g, skipped %d", first, last, stats.loss_scale, stats.skipped_steps))
assert(last < 0.6 * first, "fp16 training must lower the loss")
-- 80 clean steps at growth_interval 10 double the scale 8 times (this seeded run never overflows).
assert(stats.skipped_steps == 0, "no overflow expected at these scales")
assert(stats.loss_scale == 1024 * 2 ^ 8, "the scale grows every 10 clean steps: " .. stats.loss_scale)
assert(stats.steps + stats.skipped_steps == 80, "every batch is a step or a skipped step")

first, last, stats = train_with(b16)
print(string.format("bf16: loss %.4f -> %.4f", first, last))
assert(last < 0.6 * first, "bf16 training must lower the loss")
assert(stats.loss_scale == 1 and stats.skipped_steps == 0)

first, last = train_with(b16_sr)
print(string.format("bf16 without masters, stochastic rounding: loss %.4f -> %.4f", first, last))
assert(last < 0.6 * first, "bf16 training with stochastic rounding must lower the loss")
print("ok")
