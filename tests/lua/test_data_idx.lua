-- lamp.data.idx from Lua: a directory of IDX files written here with io; the class count is
-- inferred only from labels 0..K-1, given with {classes = N} otherwise, and every label is
-- checked against it; what is not a regular file is refused.
local lamp = require "lamp"

local function expect_error(fn, expected)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error containing: " .. expected)
  err = tostring(err)
  if not err:find(expected, 1, true) then
    error(string.format("error message mismatch\n  expected to contain: %s\n  got: %s", expected, err), 2)
  end
end

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))

local function be32(v) return string.char(v >> 24 & 255, v >> 16 & 255, v >> 8 & 255, v & 255) end

-- <dir>/train-images-idx3-ubyte (n x 2 x 2) and train-labels-idx1-ubyte with the labels given.
local function write_set(labels)
  local n = #labels
  local images = assert(io.open(dir .. "/train-images-idx3-ubyte", "wb"))
  images:write("\0\0\8\3", be32(n), be32(2), be32(2), string.rep("\7", 4 * n))
  images:close()
  local out = assert(io.open(dir .. "/train-labels-idx1-ubyte", "wb"))
  out:write("\0\0\8\1", be32(n), string.char(table.unpack(labels)))
  out:close()
end
local label_file = dir .. "/train-labels-idx1-ubyte"

-- Labels 0..K-1: K classes, inferred.
write_set { 0, 2, 1, 2, 0 }
local ds = lamp.data.idx(dir, "train")
assert(#ds == 5 and ds:classes() == 3, tostring(ds))

-- A gap: not inferred, and the message says how to give the count.
write_set { 0, 1, 4, 1 }
expect_error(function() lamp.data.idx(dir, "train") end,
  dir .. "/train: cannot infer the number of classes: the labels in " .. label_file .. " go up to 4 but label 2 "
  .. "never occurs, so they are not 0 to K-1; give the count with lamp.data.idx(dir, split, {classes = N})")

-- Given, the count is used as it is; the options may also stand in the split's place.
assert(lamp.data.idx(dir, "train", { classes = 10 }):classes() == 10)
assert(lamp.data.idx(dir, { classes = 5 }):classes() == 5)
assert(lamp.data.idx(dir, { classes = 5 }):name() == dir .. "/train")

-- A label outside the given count is refused naming its index and value.
expect_error(function() lamp.data.idx(dir, "train", { classes = 4 }) end,
  dir .. "/train: label 4 at index 2 of " .. label_file .. " is outside [0, 4) (classes = 4)")

-- The option itself is checked.
expect_error(function() lamp.data.idx(dir, "train", { classes = 0 }) end,
  "data.idx: 'classes' must be an integer in [1, 256], got 0")
expect_error(function() lamp.data.idx(dir, "train", { classes = 257 }) end,
  "data.idx: 'classes' must be an integer in [1, 256], got 257")
expect_error(function() lamp.data.idx(dir, "train", { classes = 2.5 }) end,
  "data.idx: 'classes' must be an integer in [1, 256], got 2.5")
expect_error(function() lamp.data.idx(dir, "train", { clases = 3 }) end,
  "data.idx: unknown field 'clases'; valid fields: classes")

-- A FIFO where the labels should be: refused at once (no writer ever comes).
os.remove(label_file)
assert(os.execute("mkfifo '" .. label_file .. "'"))
expect_error(function() lamp.data.idx(dir, "train") end, label_file .. " is a FIFO, not a regular file")

-- The installed Fashion-MNIST knows its 10 classes; a smaller count given is checked against its labels.
local f = io.open("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", "rb")
if f then
  f:close()
  local test = lamp.data.idx("fashion-mnist", "t10k")
  assert(test:classes() == 10)
  expect_error(function() lamp.data.idx("fashion-mnist", "t10k", { classes = 5 }) end, "is outside [0, 5) (classes = 5)")
end

os.execute("rm -rf '" .. dir .. "'")
print("test_data_idx: ok")
