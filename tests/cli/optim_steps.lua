-- Trains a small MLP a few steps with each built-in optimizer on the CPU, under fp32 and under
-- bf16 without master weights (whose step writes the 16-bit weights itself, weights_out), and
-- asserts that the loss falls. Used by test_optim_cuda_plugins.sh: plugins built with their CUDA
-- step must still load and train on a machine without CUDA. arg[1], where given, is a plugin
-- built against ABI 1.1 (tests/bad_plugins/optim11.c), trained the same way: the core must not
-- hand it weights_out, and must refresh the 16-bit weights itself. Last it prints which CUDA
-- files the process has mapped: a CPU run must not load the cuda backend (nor the cuBLAS it links).
local lamp = require "lamp"
local nn = lamp.nn
local train = lamp.data.idx("fashion-mnist", "train"):subset(1, 1000)
local loader = lamp.data.loader(train, { batch = 50, shuffle = true, seed = 1 })
local cases = {
  { "sgd", { lr = 0.1, momentum = 0.9, weight_decay = 1e-4 } },
  { "adam", { lr = 1e-3 } },
  { "adamw", { lr = 1e-3, weight_decay = 0.01 } },
}
if arg[1] then cases[#cases + 1] = { arg[1], { lr = 0.1 }, "optim11" } end
for _, case in ipairs(cases) do
  for _, precision in ipairs { "fp32", "bf16" } do
    local trainer = lamp.Trainer {
      model = nn.Sequential { nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10) },
      loss = nn.CrossEntropy(), comm = lamp.comm("single"), seed = 1,
      precision = precision == "fp32" and lamp.precision("fp32") or lamp.precision("bf16", { master_weights = 0 }),
      optim = lamp.optim(case[1], case[2]),
    }
    local first = trainer:epoch(loader).loss
    local last = trainer:epoch(loader).loss
    local name = case[3] or case[1]
    print(string.format("%s %s: loss %.4f -> %.4f", name, precision, first, last))
    assert(last < first, name .. " under " .. precision .. " must lower the loss")
  end
end

local maps = io.open("/proc/self/maps")
if maps then
  local seen = {}
  for line in maps:lines() do
    local file = line:match("/([^/]*cuda[^/]*%.so)$") or line:match("/(libcublas[^/]*)$")
    if file and not seen[file] then
      seen[file] = true
      seen[#seen + 1] = file
    end
  end
  maps:close()
  table.sort(seen)
  print("cuda files mapped: " .. (#seen > 0 and table.concat(seen, " ") or "none"))
end
