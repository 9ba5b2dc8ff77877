-- trainer:epoch(loader, {max_steps = N}): training stops between optimizer steps and the next
-- call continues the same epoch at its next batch; an epoch closes as soon as its last batch is
-- done; chunked epochs leave the parameters exactly where one unbroken epoch does.
local lamp = require "lamp"
local nn = lamp.nn

local train = lamp.data.idx("fashion-mnist", "train"):subset(1, 256)
local function trainer_and_loader()
  local loader = lamp.data.loader(train, { batch = 32, shuffle = true, drop_last = true, seed = 4 })
  local t = lamp.Trainer { model = nn.Sequential { nn.Linear(784, 16), nn.ReLU(), nn.Linear(16, 10) },
                           loss = nn.CrossEntropy(), precision = lamp.precision("fp32"), comm = lamp.comm("single"),
                           optim = lamp.optim("sgd", { lr = 0.05, momentum = 0.9 }), seed = 4 }
  return t, loader
end

local a, la = trainer_and_loader()
assert(la:batches() == 8)
local r = a:epoch(la, { max_steps = 3 })
assert(r.done == false and r.samples == 96, "3 steps then stop")
assert(a:stats().steps == 3 and a:stats().epochs == 0)
r = a:epoch(la, { max_steps = 5 })
assert(r.done == true and r.samples == 160, "the last 5 batches close the epoch at once")
assert(a:stats().steps == 8 and a:stats().epochs == 1)
r = a:epoch(la, { max_steps = 2 })
assert(r.done == false and a:stats().epochs == 1 and a:stats().steps == 10)
r = a:epoch(la)
assert(r.done == true and r.samples == 192 and a:stats().epochs == 2)

local b, lb = trainer_and_loader()
b:epoch(lb)
b:epoch(lb)
assert(b:stats().steps == 10 + 6 and b:stats().epochs == 2)
-- Same data order, same steps: the same bits (checked through a checkpoint of each).
local dir = os.tmpname()
os.remove(dir)
local pa, pb = a:save(dir .. ".a.lamp"), b:save(dir .. ".b.lamp")
local fa, fb = assert(io.open(pa, "rb")), assert(io.open(pb, "rb"))
local same = fa:read("a") == fb:read("a")
fa:close()
fb:close()
os.remove(pa)
os.remove(pb)
assert(same, "chunked epochs must give the same checkpoint as unbroken ones")

local ok, err = pcall(function() a:epoch(la, { max_steps = -1 }) end)
assert(not ok and tostring(err):find("trainer:epoch: 'max_steps' must be >= 0 (0: the whole epoch), got -1", 1, true),
       tostring(err))
ok, err = pcall(function() a:epoch(la, { steps = 1 }) end)
assert(not ok and tostring(err):find("unknown field 'steps'", 1, true), tostring(err))
print("epoch steps: ok")
