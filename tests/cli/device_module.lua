-- Run by test_backend_modules.sh with LAMP_BACKEND_DIR at the fake cuda module (two devices over host
-- memory): what lamp.device() and lamp.devices() return for a loaded device, and what they raise.
local lamp = require "lamp"

local function expect_error(fn, expected)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error: " .. expected)
  err = tostring(err):gsub("^[^:]*:%d+: ", "")
  assert(err == expected, "expected '" .. expected .. "', got '" .. err .. "'")
end

local d = lamp.device("cuda:1")
assert(d.name == "cuda" and d.ordinal == 1 and d.count == 2, "cuda:1's name, ordinal and count")
assert(d.device_name == "Fake GPU 1" and d.memory == 2 * 2^30 and d.compute_capability == "9.1", "its description")
assert(lamp.device("cuda").ordinal == 1) -- "cuda" is the chosen one
expect_error(function() lamp.device("cuda:2") end, "device cuda:2 does not exist (this process sees 2 cuda devices)")

local all = lamp.devices()
assert(#all == 3, "cpu, cuda:0 and cuda:1, got " .. #all)
assert(all[1].name == "cpu" and all[1].ordinal == 0 and all[1].compute_capability == nil and all[1].memory > 0)
assert(all[2].name == "cuda" and all[2].ordinal == 0 and all[2].device_name == "Fake GPU 0")
assert(all[3].name == "cuda" and all[3].ordinal == 1 and all[3].compute_capability == "9.1")
print("device module ok")
