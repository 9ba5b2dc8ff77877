-- Trainer{metrics = FILE} from Lua: the option's errors name the field or the file, and a run
-- writes one line per optimizer step and one per epoch (the records themselves: tests/unit/
-- test_metrics.c; the scripts' --metrics, lamp plot and a killed run: tests/cli/test_metrics.sh).
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

local train = lamp.data.idx("fashion-mnist", "train"):subset(1, 256)
local function trainer(metrics)
  return lamp.Trainer { model = nn.Sequential { nn.Linear(784, 16), nn.ReLU(), nn.Linear(16, 10) },
                        loss = nn.CrossEntropy(), precision = lamp.precision("fp32"), comm = lamp.comm("single"),
                        optim = lamp.optim("sgd", { lr = 0.05 }), metrics = metrics }
end

expect_error(function() trainer(42) end, "Trainer: 'metrics' must be a file name (a string), got number")
expect_error(function() trainer(true) end, "Trainer: 'metrics' must be a file name (a string), got boolean")
expect_error(function() trainer("") end, "Trainer: 'metrics' must name a file, got an empty string")
expect_error(function() trainer("tests/lua") end,
  "Trainer: cannot open the metrics file tests/lua for writing: Is a directory")
expect_error(function() trainer("tests/lua/test_metrics.lua/run.jsonl") end,
  "Trainer: cannot open the metrics file tests/lua/test_metrics.lua/run.jsonl for writing: Not a directory")

local path = os.tmpname()
local t <close> = trainer(path)
local loader = lamp.data.loader(train, { batch = 32, shuffle = true, drop_last = true, seed = 4 })
t:epoch(loader)
local test = lamp.data.loader(lamp.data.idx("fashion-mnist", "t10k"):subset(1, 200), { batch = 100 })
t:evaluate(test)
local lines = {}
for line in io.lines(path) do lines[#lines + 1] = line end
os.remove(path)
assert(#lines == 8 + 1, "8 step records and the epoch's, got " .. #lines)
for i = 1, 8 do
  assert(lines[i]:find('^{"type":"step","step":' .. i .. ',"epoch":1,'), lines[i])
end
assert(lines[9]:find('^{"type":"epoch","epoch":1,"step":8,'), lines[9])
assert(lines[9]:find('"test_samples":200}$'), lines[9])
