-- lamp.checkpoint from Lua: info() on the committed sample (tests/fuzz/corpus/checkpoint, made by
-- tests/fuzz/make_seeds.py) returns the dump as a string; bad files and folders raise or return nil.
local lamp = require "lamp"

local function expect_error(fn, expected)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error containing: " .. expected)
  err = tostring(err)
  if not err:find(expected, 1, true) then
    error(string.format("error message mismatch\n  expected to contain: %s\n  got: %s", expected, err), 2)
  end
end

local sample = "tests/fuzz/corpus/checkpoint/sample.lamp"
local text = lamp.checkpoint.info(sample)
assert(type(text) == "string")
for _, want in ipairs {
  sample .. ": lamp checkpoint format 1, 472 bytes",
  "metas (3):", "  int  step       1200", '  str  precision  "fp16"', "  f64  lr         0.001",
  "entries (4, 126 bytes of data):",
  "  tensor  0.weight  f32[3, 5]", "  tensor  0.bias    bf16[5]", "  tensor  rng       u64[4]", "  blob    scaler    u8[24]",
} do
  assert(text:find(want, 1, true), "info lacks '" .. want .. "':\n" .. text)
end

expect_error(function() lamp.checkpoint.info("tests/fuzz/corpus/idx/labels.idx") end,
  "tests/fuzz/corpus/idx/labels.idx: not a lamp checkpoint (it starts with bytes 00 00 08 01 00 00 00 0a, " ..
  'expected the magic "LAMPCKPT")')
expect_error(function() lamp.checkpoint.info("no/such.lamp") end, "cannot open no/such.lamp: No such file or directory")
expect_error(function() lamp.checkpoint.info() end, "bad argument #1 to 'info'")

-- The corpus folder's names are not ckpt-<step>.lamp, and a missing folder has none: nil.
assert(lamp.checkpoint.latest("tests/fuzz/corpus/checkpoint") == nil)
assert(lamp.checkpoint.latest("no/such/folder") == nil)
print("checkpoint info ok")
