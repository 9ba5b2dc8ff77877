-- The Lua face: argument parsing, option validation, object lifetimes and error messages.
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

-- parse_args: numbers, booleans, flags, positionals, defaults, unknown keys.
local a = lamp.parse_args({ "--epochs=3", "--lr=0.1", "--shuffle=false", "--verbose", "file.txt", "--name=x" })
assert(a.epochs == 3 and math.type(a.epochs) == "integer")
assert(a.lr == 0.1 and a.shuffle == false and a.verbose == true and a.name == "x" and a[1] == "file.txt")
local d = lamp.parse_args({ "--epochs=2" }, { epochs = 1, batch = 128 })
assert(d.epochs == 2 and d.batch == 128)
expect_error(function() lamp.parse_args({ "--epoch=2" }, { epochs = 1, batch = 128 }) end,
  "unknown argument --epoch; valid arguments: --batch, --epochs")

-- Layers and containers.
local model = nn.Sequential { nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2) }
assert(model:parameters() == 4 * 3 + 3 + 3 * 2 + 2)
assert(model:type() == "Sequential")
assert(tostring(model):find("Linear(4 -> 3)", 1, true), tostring(model))
expect_error(function() nn.Sequential { nn.ReLU(), 42 } end, "nn.Sequential: element 2 is a number, expected a layer")
expect_error(function() nn.Sequential {} end, "nn.Sequential: expected a list of layers, got an empty table")
expect_error(function() nn.Linear(0, 3) end, "nn.Linear: in_features must be a positive integer, got 0")

-- Deterministic finalisation: close twice is harmless, use after close is an error.
local relu = nn.ReLU()
relu:close()
relu:close()
expect_error(function() relu:type() end, "attempt to use a closed lamp.Layer")
do
  local l <close> = nn.Linear(2, 2)
  assert(l:parameters() == 6)
end

expect_error(function() lamp.data.loader(lamp.data.idx("fashion-mnist", "t10k"), { comm = 5 }) end,
  "data.loader: 'comm' must be an open lamp.Comm, got number")

-- Plugin options are validated against what the plugin declares.
local sgd = lamp.optim("sgd", { lr = 0.5, momentum = 0.9 })
assert(sgd:get("lr") == 0.5 and sgd:name() == "sgd")
expect_error(function() lamp.optim("sgd", { lr = "fast" }) end, "sgd: option 'lr' must be a number in [0, 1e+06], got the string \"fast\"")
local precision = lamp.precision("fp32")
local policy = precision:policy()
assert(policy.weight_dtype == "f32" and policy.compute_dtype == "f32" and not policy.master_weights)
local comm = lamp.comm("single")
assert(comm:rank() == 0 and comm:size() == 1)
comm:barrier()

-- Trainer configuration errors name the field.
local base = { model = model, loss = nn.CrossEntropy(), precision = precision, comm = comm, optim = sgd }
local function with(changes)
  local t = {}
  for k, v in pairs(base) do t[k] = v end
  for k, v in pairs(changes) do t[k] = v end
  return t
end
expect_error(function() lamp.Trainer(with { epochs = 3 }) end, "Trainer: unknown field 'epochs'; valid fields: model, loss, precision, comm, optim, accum, clip, schedule, seed, param_groups, bucket_mb, compress")
expect_error(function() lamp.Trainer(with { optim = false }) end, "Trainer: 'optim' must be a lamp.Optim, got boolean")
expect_error(function()
  local t = with {}
  t.precision = nil
  lamp.Trainer(t)
end, "Trainer: 'precision' is required (e.g. lamp.precision('fp32'))")
expect_error(function() lamp.Trainer(with { accum = 0 }) end, "Trainer: 'accum' must be an integer in [1, 65536], got 0")
expect_error(function() lamp.Trainer(with { compress = "int8" }) end,
  'Trainer: compress must be "none", "bf16" or "fp16", got int8')
expect_error(function() lamp.Trainer(with { compress = "i32" }) end,
  'Trainer: compress must be "none", "bf16" or "fp16", got i32')
expect_error(function() lamp.Trainer(with { compress = true }) end,
  'Trainer: compress must be "none", "bf16" or "fp16", got boolean')
-- the other spellings of the float dtypes (lamp_dtype_parse's) are taken; "f32" is "none"
for _, spelling in ipairs { "none", "fp16", "f16", "float16", "bf16", "bfloat16", "f32" } do
  lamp.Trainer(with { compress = spelling }):close()
end
expect_error(function() lamp.Trainer(with { schedule = "linear" }) end, "Trainer: unknown schedule 'linear'; valid schedules: constant, cosine, step")
expect_error(function() lamp.lr.cosine { total = 0 } end, "lr.cosine: 'total' (optimizer steps) must be positive, got 0")

-- A trainer pins the plugin objects it uses: closing them under it is refused.
local trainer = lamp.Trainer(with { seed = 1 })
assert(trainer:parameters() == model:parameters())
expect_error(function() sgd:close() end, "cannot close this lamp.Optim: a lamp.Trainer still uses it")
trainer:close()
sgd:close()

-- Memory ledger as a table.
local mem = lamp.memory()
for _, k in ipairs { "params", "grads", "master", "optim_state", "activations", "workspace", "data", "total" } do
  assert(type(mem[k].current) == "number" and type(mem[k].peak) == "number", k)
end
assert(mem.total.peak >= mem.total.current)
assert(mem.sim == nil) -- other devices appear under their name once they have memory

-- Devices: the CPU always; lamp.device() makes one the run device or says why it cannot.
-- cuda is asserted for a machine without a CUDA driver (CI): the reason depends on whether this
-- build has the CUDA backend module (ctest sets LAMP_TEST_HAVE_CUDA).
local have_cuda = assert(os.getenv("LAMP_TEST_HAVE_CUDA"), "run under ctest (LAMP_TEST_HAVE_CUDA)") == "1"
local cuda_unavailable = have_cuda
  and "device cuda: no CUDA driver: CUDA driver version is insufficient for CUDA runtime version (cudaErrorInsufficientDriver)"
  or "device cuda: this build has no CUDA backend (it was configured without the CUDA toolkit: install the toolkit and configure with -DLAMP_CUDA=ON)"
local cpu = lamp.device("cpu")
assert(cpu.name == "cpu" and cpu.ordinal == 0 and cpu.count == 1)
assert(type(cpu.device_name) == "string" and #cpu.device_name > 0 and cpu.memory > 0 and cpu.compute_capability == nil)
local devices = lamp.devices()
assert(#devices == 1 and devices[1].name == "cpu")
expect_error(function() lamp.device("cuda") end, cuda_unavailable)
expect_error(function() lamp.device("cuda:1") end, cuda_unavailable) -- the reason is kept, not retried
assert(lamp.device("cpu").name == "cpu") -- and the run goes on without the device
expect_error(function() lamp.device("cuda:x") end, "lamp.device: 'cuda:x' has no valid ordinal after ':' (expected e.g. cuda:0)")
expect_error(function() lamp.device("cpu:2") end, "device cpu:2 does not exist (this process sees 1 cpu device)")
expect_error(function() lamp.device(7) end, "lamp.device: a device is a name (\"cpu\", \"cuda:0\") or lamp.device(...), got number")
print("ok")
