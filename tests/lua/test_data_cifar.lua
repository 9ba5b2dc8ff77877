-- CIFAR-10 from Lua: a tiny data set written here with io, loaded with lamp.data.cifar10,
-- normalised per channel, iterated through a loader with augmentation, resumed with seek,
-- and the error messages a user meets.
local lamp = require "lamp"

local function expect_error(fn, expected)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error containing: " .. expected)
  err = tostring(err)
  if not err:find(expected, 1, true) then
    error(string.format("error message mismatch\n  expected to contain: %s\n  got: %s", expected, err), 2)
  end
end

local function near(a, b) return math.abs(a - b) < 1e-5 end

-- A fresh directory: os.tmpname() reserves a unique name; a directory takes its place.
local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "/cifar-10-batches-bin'"))
local batches = dir .. "/cifar-10-batches-bin"

-- Byte (c, r, col) of record i in file f, and its label.
local function pix(f, i, c, r, col) return (f * 53 + i * 29 + c * 101 + r * 7 + col * 3 + 1) % 256 end
local function label(f, i) return (f * 3 + i) % 10 end

local function write_file(path, f, n, bad_label)
  local out = assert(io.open(path, "wb"))
  for i = 0, n - 1 do
    local bytes = { string.char(bad_label and i == n - 1 and bad_label or label(f, i)) }
    for c = 0, 2 do
      for r = 0, 31 do
        local row = {}
        for col = 0, 31 do row[col + 1] = pix(f, i, c, r, col) end
        bytes[#bytes + 1] = string.char(table.unpack(row))
      end
    end
    out:write(table.concat(bytes))
  end
  out:close()
end

for f = 1, 5 do write_file(batches .. "/data_batch_" .. f .. ".bin", f, 2) end
write_file(batches .. "/test_batch.bin", 0, 3)

-- The data set: 10 samples of [3, 32, 32], 10 classes, CIFAR-10's default normalisation.
local train = lamp.data.cifar10(dir, "train")
assert(#train == 10 and train:classes() == 10, tostring(train))
local shape = train:shape()
assert(shape[1] == 3 and shape[2] == 32 and shape[3] == 32)
local norm = train:normalization()
local mean0, std0 = { 0.4914, 0.4822, 0.4465 }, { 0.2470, 0.2435, 0.2616 }
for c = 1, 3 do assert(near(norm.mean[c], mean0[c]) and near(norm.std[c], std0[c])) end
assert(#lamp.data.cifar10(dir, "test") == 3)

-- Per-channel normalisation, table form: x = (p / 255 - mean_c) / std_c, NCHW order.
local mean, std = { 0.1, 0.2, 0.3 }, { 0.5, 1.0, 2.0 }
train:normalize { mean = mean, std = std }
local eval = lamp.data.loader(train, { batch = 4 })
eval:start(0)
local b = eval:next()
assert(b.shape[1] == 4 and b.shape[2] == 3 and b.shape[3] == 32 and b.shape[4] == 32)
assert(#b.x == 4 * 3072 and #b.y == 4)
for s = 0, 3 do
  local f, i = s // 2 + 1, s % 2 -- two records per file, files in order
  assert(b.y[s + 1] == label(f, i))
  for _, at in ipairs { { 0, 0, 0 }, { 1, 5, 9 }, { 2, 31, 31 } } do
    local c, r, col = at[1], at[2], at[3]
    local x = b.x[s * 3072 + c * 1024 + r * 32 + col + 1]
    assert(near(x, (pix(f, i, c, r, col) / 255 - mean[c + 1]) / std[c + 1]), string.format("sample %d at %d,%d,%d", s, c, r, col))
  end
end
-- The positional and scalar forms, and what they leave.
train:normalize(0.5, 0.25)
norm = train:normalization()
assert(norm.mean[3] == 0.5 and norm.std[2] == 0.25)
train:normalize({ 0.4914, 0.4822, 0.4465 }, { 0.2470, 0.2435, 0.2616 })
expect_error(function() train:normalize { mean = { 0, 0 }, std = { 1, 1 } } end,
  "/train: normalisation gives 2 channels, the data set has 3")
expect_error(function() train:normalize { mean = { 0, 0, 0 }, std = { 1, 0, 1 } } end,
  "/train: normalisation std of channel 1 must be finite and > 0, got 0")
expect_error(function() train:normalize { mean = 0 } end, "Dataset:normalize: the table needs both 'mean' and 'std'")
expect_error(function() train:normalize { mean = 0, std = 1, scale = 2 } end,
  "Dataset:normalize: unknown field 'scale'; valid fields: mean, std")

-- A training loader with augmentation: every epoch covers the data, reproducibly per seed.
local function epoch_of(loader, epoch)
  loader:start(epoch)
  local xs, ys = {}, {}
  while true do
    local batch = loader:next()
    if not batch then break end
    assert(batch.shape[2] == 3 and batch.shape[3] == 32 and batch.shape[4] == 32)
    for _, v in ipairs(batch.x) do xs[#xs + 1] = v end
    for _, v in ipairs(batch.y) do ys[#ys + 1] = v end
  end
  return xs, ys
end
local function same(a, b)
  if #a ~= #b then return false end
  for k = 1, #a do if a[k] ~= b[k] then return false end end
  return true
end

local opts = { batch = 4, shuffle = true, seed = 3, augment = { crop_pad = 4, flip = true } }
local l1, l2 = lamp.data.loader(train, opts), lamp.data.loader(train, opts)
assert(tostring(l1):find("random crop, random flip)", 1, true), tostring(l1))
local x1, y1 = epoch_of(l1, 1)
local x2, y2 = epoch_of(l2, 1)
assert(#y1 == 10 and #x1 == 10 * 3072)
assert(same(x1, x2) and same(y1, y2), "same seed and epoch must give the same augmented batches")
local x3 = epoch_of(l2, 2)
assert(not same(x1, x3), "another epoch must draw other crops and flips")
local plain = epoch_of(lamp.data.loader(train, { batch = 4, shuffle = true, seed = 3 }), 1)
assert(not same(x1, plain), "augmentation must change something")

-- Resume: stop after 2 batches, seek a fresh loader there, and see the rest unchanged.
l1:start(1)
l1:next()
l1:next()
local epoch, next_batch = l1:position()
assert(epoch == 1 and next_batch == 2)
local resumed = lamp.data.loader(train, opts)
resumed:seek(epoch, next_batch)
local rest = {}
while true do
  local batch = resumed:next()
  if not batch then break end
  for _, v in ipairs(batch.x) do rest[#rest + 1] = v end
end
assert(#rest == 2 * 3072)
for k = 1, #rest do assert(rest[k] == x1[8 * 3072 + k], "resumed batches differ") end
expect_error(function() resumed:seek(1, 4) end, "cannot seek to batch 4 of epoch 1: an epoch has 3 batches")

-- Options and files that are wrong.
expect_error(function() lamp.data.loader(train, { augment = { crop = 4 } }) end,
  "data.loader augment: unknown field 'crop'; valid fields: crop_pad, flip")
expect_error(function() lamp.data.loader(train, { augment = true }) end,
  "data.loader: 'augment' must be a table {crop_pad = n, flip = true}, got boolean")
expect_error(function() lamp.data.loader(train, { augment = { crop_pad = -1 } }) end,
  "data.loader: augment 'crop_pad' must be in [0, 1024], got -1")
expect_error(function() lamp.data.cifar10(dir, "valid") end, "unknown CIFAR-10 split \"valid\" (valid: train, test)")
os.remove(batches .. "/data_batch_3.bin")
expect_error(function() lamp.data.cifar10(dir, "train") end,
  "cannot open " .. batches .. "/data_batch_3.bin: No such file or directory (CIFAR-10 train needs data_batch_1.bin to data_batch_5.bin in " .. dir)
write_file(batches .. "/test_batch.bin", 0, 3, 10)
expect_error(function() lamp.data.cifar10(dir, "test") end,
  batches .. "/test_batch.bin: record 2 (at byte 6146) has label 10; CIFAR-10 labels are 0 to 9")

train:close()
os.execute("rm -rf '" .. dir .. "'")
print("ok")
