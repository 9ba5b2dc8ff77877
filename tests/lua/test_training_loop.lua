-- The training loop from Lua: learning-rate schedules (lamp.lr) in closed form and their exact
-- error messages, the linear scaling rule, param_groups as trainer:param_table() reports them,
-- and a short run on 500 Fashion-MNIST samples showing the schedule, accumulation and an
-- lr_mult of 0 at work through what Lua can observe (stats and evaluation).
local lamp = require "lamp"
local nn = lamp.nn

-- Errors raised into Lua carry "<script>:<line>: " and then the C message: compare the message.
local function expect_error(fn, expected)
  local ok, err = pcall(fn)
  assert(not ok, "expected the error: " .. expected)
  local message = tostring(err):gsub("^[^\n]-:%d+: ", "", 1)
  if message ~= expected then
    error(string.format("error message mismatch\n  expected: %s\n  got:      %s", expected, message), 2)
  end
end

-- Closed forms involve cos(): a few double roundings apart from this file's own arithmetic.
local function near(got, want, what)
  if math.abs(got - want) > 1e-15 * math.max(1, math.abs(want)) then
    error(string.format("%s: got %.17g, expected %.17g", what, got, want), 2)
  end
end

local at = lamp.lr.at

-- ---- schedules in closed form -------------------------------------------------------------------

-- constant: the base lr at every step, as a table or by name.
for _, step in ipairs { 0, 1, 9, 1000000 } do
  assert(at(lamp.lr.constant(), 0.05, step) == 0.05)
  assert(at("constant", 0.05, step) == 0.05)
end
assert(lamp.lr.constant().kind == "constant")

-- cosine without warm-up: base (1 + cos(pi s / T)) / 2, then 0 from T on.
local cos12 = lamp.lr.cosine { total = 12 }
assert(cos12.kind == "cosine" and cos12.total == 12 and cos12.warmup == 0 and cos12.min_lr == 0)
assert(at(cos12, 0.2, 0) == 0.2)
near(at(cos12, 0.2, 4), 0.15, "cosine at T/3")   -- cos(pi/3) = 1/2: 3/4 of base
near(at(cos12, 0.2, 6), 0.1, "cosine at T/2")
near(at(cos12, 0.2, 8), 0.05, "cosine at 2T/3")
for s = 0, 11 do
  near(at(cos12, 0.2, s), 0.2 * (1 + math.cos(math.pi * s / 12)) / 2, "cosine step " .. s)
  assert(at(cos12, 0.2, s) > at(cos12, 0.2, s + 1), "strictly falling until T")
end
assert(at(cos12, 0.2, 12) == 0 and at(cos12, 0.2, 100) == 0)

-- with min_lr: min + (base - min) (1 + cos(pi s / T)) / 2, and min_lr from T on.
local cosmin = lamp.lr.cosine { total = 12, min_lr = 0.02 }
for s = 0, 11 do
  near(at(cosmin, 0.2, s), 0.02 + 0.18 * (1 + math.cos(math.pi * s / 12)) / 2, "cosine min_lr step " .. s)
end
assert(at(cosmin, 0.2, 12) == 0.02 and at(cosmin, 0.2, 1000) == 0.02)

-- warm-up: base (s + 1) / W for s < W, then the cosine over T - W steps, then min_lr.
local wc = lamp.lr.warmup_cosine { warmup = 4, total = 12, min_lr = 0.04 }
assert(wc.kind == "cosine" and wc.warmup == 4 and wc.total == 12 and wc.min_lr == 0.04)
assert(at(wc, 0.4, 0) == 0.1 and at(wc, 0.4, 1) == 0.2)
near(at(wc, 0.4, 2), 0.3, "warm-up step 2")
assert(at(wc, 0.4, 3) == 0.4 and at(wc, 0.4, 4) == 0.4)
for s = 4, 11 do
  near(at(wc, 0.4, s), 0.04 + 0.36 * (1 + math.cos(math.pi * (s - 4) / 8)) / 2, "warmup_cosine step " .. s)
end
assert(at(wc, 0.4, 12) == 0.04 and at(wc, 0.4, 50) == 0.04)

-- step: base gamma^floor(s / step_size); powers of 1/2 are exact.
local st = lamp.lr.step { step_size = 3, gamma = 0.5 }
assert(st.kind == "step" and st.step_size == 3 and st.gamma == 0.5)
local want = { 1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125 }
for s = 0, 9 do assert(at(st, 1.0, s) == want[s + 1], "step schedule at " .. s) end
assert(lamp.lr.step { step_size = 4 }.gamma == 0.1) -- the default gamma
near(at(lamp.lr.step { step_size = 4 }, 0.3, 8), 0.003, "step with the default gamma 0.1")

-- The linear scaling rule: base_lr * B_eff / base_batch.
assert(lamp.lr.linear_scaling(0.1, 256, 1024) == 0.4)
assert(lamp.lr.linear_scaling(0.1, 256, 128) == 0.05)
near(lamp.lr.linear_scaling(0.05, 128, 32 * 4 * 2), 0.1, "32 per rank x 4 ranks x accum 2")

-- ---- schedule errors, exactly -------------------------------------------------------------------

expect_error(function() lamp.lr.warmup_cosine { warmup = 10, total = 10 } end,
  "schedule: warmup (10 steps) must be shorter than total (10)")
expect_error(function() lamp.lr.warmup_cosine { warmup = 3 } end, "schedule: cosine needs total > 0 steps")
expect_error(function() lamp.lr.cosine { total = 0 } end, "lr.cosine: 'total' (optimizer steps) must be positive, got 0")
expect_error(function() lamp.lr.cosine { total = 10, warmup = -1 } end,
  "lr.cosine: 'warmup' must be a number of steps >= 0, got -1")
expect_error(function() lamp.lr.cosine { total = 10, min_lr = -1 } end,
  "schedule: min_lr must be a finite number >= 0, got -1")
expect_error(function() lamp.lr.cosine { total = 10, steps = 3 } end,
  "lr.cosine: unknown field 'steps'; valid fields: kind, total, min_lr, warmup, step_size, gamma")
expect_error(function() lamp.lr.step { step_size = 5, gamma = 0 } end, "schedule: gamma must be in (0, 1], got 0")
expect_error(function() lamp.lr.step { step_size = 5, gamma = 2 } end, "schedule: gamma must be in (0, 1], got 2")
expect_error(function() lamp.lr.step { step_size = 0 } end, "schedule: step needs step_size > 0 steps")
expect_error(function() lamp.lr.step { gamma = 0.5 } end, "schedule: step needs step_size > 0 steps")
expect_error(function() at({ kind = "linear" }, 0.1, 0) end,
  "lr.at: unknown schedule 'linear'; valid schedules: constant, cosine, step")
expect_error(function() at({ kind = 5 }, 0.1, 0) end,
  "lr.at: unknown schedule '5'; valid schedules: constant, cosine, step")
expect_error(function() at({}, 0.1, 0) end, "lr.at: unknown schedule 'nil'; valid schedules: constant, cosine, step")
expect_error(function() at("cosine", 0.1, 0) end, "schedule: cosine needs total > 0 steps")
expect_error(function() at(42, 0.1, 0) end, "lr.at: schedule must be a name or a lamp.lr table, got number")
expect_error(function() at(lamp.lr.constant(), 0.1, -1) end, "lr.at: step must be >= 0, got -1")
expect_error(function() lamp.lr.linear_scaling(0.1, 0, 512) end, "lr.linear_scaling: base_batch must be > 0, got 0")
expect_error(function() lamp.lr.linear_scaling(-0.5, 256, 512) end, "lr.linear_scaling: base_lr must be >= 0, got -0.5")
expect_error(function() lamp.lr.linear_scaling(0.1, 256, 0) end,
  "lr.linear_scaling: effective batch must be > 0, got 0")

-- ---- param_groups -------------------------------------------------------------------------------

local precision, comm = lamp.precision("fp32"), lamp.comm("single")

-- A layer belongs to one model once: every Trainer gets a fresh one.
local function trainer_with(fields)
  local t = {
    model = nn.Sequential { nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10) },
    loss = nn.CrossEntropy(), precision = precision, comm = comm,
    optim = lamp.optim("sgd", { lr = 0.1, weight_decay = 1e-3 }), seed = 5,
  }
  for k, v in pairs(fields or {}) do t[k] = v end
  return lamp.Trainer(t)
end

-- name -> {decay, lr_mult} of a trainer's param_table(), which lists the slab in order.
local function options_of(trainer)
  local by_name, offset = {}, 0
  for i, p in ipairs(trainer:param_table()) do
    assert(p.offset == offset, "parameter " .. i .. " follows the previous one in the slab")
    offset = offset + p.count
    by_name[p.name] = { decay = p.decay, lr_mult = p.lr_mult, count = p.count, shape = p.shape }
  end
  assert(offset == trainer:parameters())
  return by_name
end

-- Defaults: weights decay, biases do not; lr_mult 1.
do
  local t <close> = trainer_with()
  local o = options_of(t)
  assert(#t:param_table() == 4)
  assert(o["0.weight"].decay == true and o["0.weight"].lr_mult == 1 and o["0.weight"].count == 784 * 64)
  assert(o["0.weight"].shape[1] == 64 and o["0.weight"].shape[2] == 784)
  assert(o["0.bias"].decay == false and o["0.bias"].lr_mult == 1 and o["0.bias"].count == 64)
  assert(o["2.weight"].decay == true and o["2.weight"].lr_mult == 1 and o["2.weight"].count == 640)
  assert(o["2.bias"].decay == false and o["2.bias"].lr_mult == 1 and o["2.bias"].count == 10)
end

-- Groups apply in order; a later group overrides only the fields it sets.
do
  local t <close> = trainer_with { param_groups = {
    { match = "bias$", lr_mult = 0 },
    { match = "^2%.", decay = false },
    { match = "^2%.bias$", lr_mult = 0.5 },
    { match = "^0%.bias$", decay = true },
  } }
  local o = options_of(t)
  assert(o["0.weight"].decay == true and o["0.weight"].lr_mult == 1)
  assert(o["0.bias"].decay == true and o["0.bias"].lr_mult == 0)
  assert(o["2.weight"].decay == false and o["2.weight"].lr_mult == 1)
  assert(o["2.bias"].decay == false and o["2.bias"].lr_mult == 0.5)
end

expect_error(function() trainer_with { epochs = 3 } end,
  "Trainer: unknown field 'epochs'; valid fields: model, loss, precision, comm, optim, accum, clip, schedule, seed, param_groups, bucket_mb, compress, device, max_skipped, graphs, metrics, shard_optimizer")
-- Asserted for a machine without a CUDA driver (CI); ctest says whether the build has the module.
local have_cuda = assert(os.getenv("LAMP_TEST_HAVE_CUDA"), "run under ctest (LAMP_TEST_HAVE_CUDA)") == "1"
expect_error(function() trainer_with { device = "cuda" } end, have_cuda
  and "device cuda: no CUDA driver: CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver)"
  or "device cuda: this build has no CUDA backend (it was configured without the CUDA toolkit: install the toolkit and configure with -DLAMP_CUDA=ON)")
expect_error(function() trainer_with { device = "tpu" } end, "device 'tpu' is not known (expected one of: cpu, cuda)")
expect_error(function() trainer_with { device = 3 } end,
  "Trainer: 'device': a device is a name (\"cpu\", \"cuda:0\") or lamp.device(...), got number")
expect_error(function() trainer_with { device = "cpu:1" } end, "device cpu:1 does not exist (this process sees 1 cpu device)")
assert(trainer_with { device = lamp.device("cpu") })
-- graphs: a boolean; true where the device cannot record them is an error, false always works.
expect_error(function() trainer_with { graphs = true } end,
  "Trainer: graphs = true needs a device that records graphs (cuda); cpu does not")
expect_error(function() trainer_with { graphs = "on" } end, 'Trainer: \'graphs\' must be a boolean, got the string "on"')
do
  local t <close> = trainer_with { graphs = false }
  local s = t:stats()
  assert(s.graphs == false and s.graph_records == 0 and s.graph_replays == 0)
end
-- shard_optimizer: a boolean; on one rank (single) it is accepted and shards nothing.
expect_error(function() trainer_with { shard_optimizer = 1 } end,
  "Trainer: 'shard_optimizer' must be a boolean, got 1")
do
  local t <close> = trainer_with { shard_optimizer = true }
  assert(t:stats().world == 1)
end
expect_error(function() trainer_with { param_groups = { { match = "bias$" }, { match = "^nothing" } } } end,
  "Trainer: param_groups[2]: pattern '^nothing' matches no parameter (names look like '0.weight')")
expect_error(function() trainer_with { param_groups = { { match = "bias$", lr = 0 } } } end,
  "Trainer: param_groups[1]: unknown field 'lr'; valid fields: match, lr_mult, decay")
expect_error(function() trainer_with { param_groups = { { lr_mult = 0 } } } end,
  "Trainer: param_groups[1]: 'match' must be a Lua pattern string, got nil")
expect_error(function() trainer_with { param_groups = { "bias$" } } end,
  "Trainer: param_groups[1] must be a table, got string")
expect_error(function() trainer_with { param_groups = 5 } end,
  "Trainer: 'param_groups' must be a list of tables, got number")
expect_error(function() trainer_with { param_groups = { { match = "bias$", lr_mult = -1 } } } end,
  "Trainer: lr_mult of 0.bias must be a finite number >= 0, got -1")
expect_error(function() trainer_with { schedule = "linear" } end,
  "Trainer: unknown schedule 'linear'; valid schedules: constant, cosine, step")
expect_error(function() trainer_with { schedule = { kind = "cosine", total = 5, warmup = 5 } } end,
  "schedule: warmup (5 steps) must be shorter than total (5)")
collectgarbage() -- the trainers made before those errors were raised

-- ---- a short run on real data -------------------------------------------------------------------

local data = lamp.data.idx("fashion-mnist", "train"):subset(1, 500)
local loader = lamp.data.loader(data, { batch = 25, shuffle = true, seed = 3 })
local whole = lamp.data.loader(data, { batch = 500 })
assert(loader:batches() == 20)

-- accum 2 x 25 rows: 10 optimizer steps per epoch under a warm-up cosine over exactly those.
local schedule = lamp.lr.warmup_cosine { warmup = 3, total = 10, min_lr = 0.005 }
do
  local t <close> = trainer_with { accum = 2, schedule = schedule, param_groups = { { match = "bias$", lr_mult = 0 } } }
  local before = t:evaluate(whole).loss
  local r = t:epoch(loader)
  local after = t:evaluate(whole).loss
  local s = t:stats()
  print(string.format("biases frozen, weights trained: loss %.4f -> %.4f in %d steps (%d micro-steps), last lr %.4g",
    before, after, s.steps, s.micro_steps, s.lr))
  assert(r.samples == 500 and s.samples == 500)
  assert(s.steps == 10 and s.micro_steps == 20 and s.skipped_steps == 0)
  assert(s.batch == 25 and s.effective_batch == 50, "B_eff = 25 x 1 rank x accum 2")
  assert(s.lr == at(schedule, 0.1, 9), "the last step took lr(9): one schedule index per optimizer step")
  assert(after < 0.8 * before, "the weights still learn")
end

-- Everything at lr_mult 0: ten real steps (weight decay included) and the model is unchanged,
-- so its evaluation is identical to the last bit.
do
  local t <close> = trainer_with { param_groups = { { match = ".", lr_mult = 0, decay = true } } }
  for _, p in ipairs(t:param_table()) do assert(p.lr_mult == 0 and p.decay == true) end
  local before = t:evaluate(whole)
  t:epoch(lamp.data.loader(data, { batch = 50 }))
  local after = t:evaluate(whole)
  assert(t:stats().steps == 10)
  assert(after.loss == before.loss and after.accuracy == before.accuracy,
    string.format("a model at lr_mult 0 moved: loss %.17g -> %.17g", before.loss, after.loss))
end

print("ok")
