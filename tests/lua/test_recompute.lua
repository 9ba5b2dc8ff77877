-- nn.Recompute from Lua: its messages, its printed form, and checkpoints: a model with Recompute
-- and the same model without it name their parameters alike, so each resumes the other's
-- checkpoint, and since the steps are bit-identical, three steps with one and three with the other
-- leave the checkpoint of six straight steps with the second, byte for byte.
local lamp = require "lamp"
local nn = lamp.nn

local function expect_error(fn, expected)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error: " .. expected)
  err = tostring(err)
  if not err:find(expected, 1, true) then
    error(string.format("error message mismatch\n  expected to contain: %s\n  got: %s", expected, err), 2)
  end
end

expect_error(function() nn.Recompute() end, "nn.Recompute: argument 1 (module) must be a layer, got no value")
expect_error(function() nn.Recompute(5) end, "nn.Recompute: argument 1 (module) must be a layer, got number")
expect_error(function() nn.Recompute(nn.CrossEntropy()) end,
  "nn.Recompute: argument 1 (module) must be a layer, got userdata")
local tree = tostring(nn.Recompute(nn.Linear(4, 3)))
assert(tree:find("^Recompute +15\n  %(1%): Linear%(4 %-> 3%) +15\ntotal parameters: 15$"), tree)

local function conv(c_in, c_out) return nn.Conv2d(c_in, c_out, 3, { padding = 1, bias = false }) end
local function network(recompute)
  local wrap = recompute and nn.Recompute or function(m) return m end
  return nn.Sequential {
    wrap(nn.Sequential { conv(1, 4), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Residual(nn.Sequential { conv(4, 4), nn.BatchNorm2d(4), nn.ReLU() }), nn.MaxPool2d(2) }),
    wrap(nn.Sequential { nn.Dropout(0.2), nn.GlobalAvgPool(), nn.Flatten(), nn.Linear(4, 10) }),
  }
end

local train = lamp.data.idx("fashion-mnist", "train"):subset(1, 128)
local tmp = os.tmpname()
os.remove(tmp)
local function trainer_of(recompute)
  return lamp.Trainer { model = network(recompute), loss = nn.CrossEntropy(), precision = lamp.precision("fp32"),
                        comm = lamp.comm("single"), optim = lamp.optim("sgd", { lr = 0.05, momentum = 0.9 }), seed = 2 }
end
local function steps(trainer, n)
  local loader = lamp.data.loader(train, { batch = 16, shuffle = true, drop_last = true, seed = 1 })
  local goal = trainer:stats().steps + n
  while trainer:stats().steps < goal do trainer:epoch(loader, { max_steps = goal - trainer:stats().steps }) end
end
local function bytes(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- Six steps straight, with and without Recompute (the checkpoints differ only in the printed model
-- they record, run.model).
for _, recompute in ipairs { false, true } do
  local t = trainer_of(recompute)
  steps(t, 6)
  t:save(tmp .. "-straight-" .. tostring(recompute))
end

-- Three steps with one, saved, resumed by the other, three more: the other's straight checkpoint.
for _, first in ipairs { true, false } do
  local a = trainer_of(first)
  steps(a, 3)
  a:save(tmp .. "-half")
  local b = trainer_of(not first)
  assert(b:resume(tmp .. "-half"))
  steps(b, 3)
  b:save(tmp .. "-mixed")
  assert(bytes(tmp .. "-mixed") == bytes(tmp .. "-straight-" .. tostring(not first)),
    string.format("3 steps %s Recompute then 3 %s leave another checkpoint than 6 %s",
      first and "with" or "without", first and "without" or "with", first and "without" or "with"))
  os.remove(tmp .. "-half")
  os.remove(tmp .. "-mixed")
end
os.remove(tmp .. "-straight-false")
os.remove(tmp .. "-straight-true")
print("recompute: ok")
