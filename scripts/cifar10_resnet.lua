-- Trains the small ResNet (scripts/lib/resnet.lua) on CIFAR-10, for users who have the binary
-- version on disk (https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz, unpacked; lamp does
-- not ship it): data_batch_1.bin ... data_batch_5.bin and test_batch.bin in --data or in its
-- cifar-10-batches-bin/ subfolder.
--
--   build/lamp scripts/cifar10_resnet.lua --data=DIR [--epochs=30] [--batch=128] [--seed=0]
--       [--precision=fp32|fp16|bf16] [--comm=auto] [--optim=sgd|adamw] [--lr=] [--wd=5e-4]
--       [--accum=1] [--width=16,32] [--augment=1] [--save=DIR] [--save_every=STEPS] [--keep=3]
--       [--resume=DIR] [--start_over] [--metrics=FILE] [--zero=0|1] [--recompute]
--
-- --save, --resume, --start_over, --metrics and --zero work as in scripts/fmnist_mlp.lua; --recompute as in
-- scripts/fmnist_resnet.lua (each stage in nn.Recompute).
-- Training images get the usual augmentation (random 32x32 crop of the image padded by 4,
-- random horizontal flip), seeded so that a run is reproducible; both splits are normalised
-- per channel with the CIFAR-10 mean and std.
package.path = arg[0]:gsub("[^/]*$", "") .. "lib/?.lua;" .. package.path
local lamp = require "lamp"
local resnet = require "resnet"
local training = require "training"
local nn = lamp.nn

local args = lamp.parse_args(arg, {
  data = "", epochs = 30, batch = 128, lr = "auto", momentum = 0.9, wd = 5e-4, seed = 0, precision = "fp32",
  comm = "auto", optim = "sgd", accum = 1, width = "16,32", augment = 1, limit = 0,
  save = "", save_every = 0, keep = 3, resume = "", start_over = false, device = "cpu", metrics = "", zero = 0,
  recompute = false,
})
if args.data == "" then error("--data=DIR is required: the folder holding CIFAR-10's binary files", 0) end

local widths = {}
for w in tostring(args.width):gmatch("[^,]+") do widths[#widths + 1] = math.tointeger(tonumber(w)) end
if #widths ~= 2 or not widths[1] or not widths[2] then
  error("--width: expected two integers like 16,32, got " .. tostring(args.width), 0)
end

local MEAN, STD = { 0.4914, 0.4822, 0.4465 }, { 0.2470, 0.2435, 0.2616 }
lamp.device(args.device) -- before the communicator: "auto" asks the plugins, which see the run device
local comm = lamp.comm(args.comm)
local train = lamp.data.cifar10(args.data, "train")
local test = lamp.data.cifar10(args.data, "test")
train:normalize { mean = MEAN, std = STD }
test:normalize { mean = MEAN, std = STD }
train = training.limit(train, args.limit)

local loader = lamp.data.loader(train, {
  batch = training.rank_batch(args.batch, comm), shuffle = true, drop_last = true, seed = args.seed, comm = comm,
  augment = args.augment ~= 0 and { crop_pad = 4, flip = true } or nil,
})
local test_loader = lamp.data.loader(test, { batch = 500 })

local optim = training.optimizer(lamp, args, 0.1)
local total_steps = loader:batches() * args.epochs // args.accum
local trainer = lamp.Trainer {
  model = resnet.build(nn, 3, 10, widths, training.flag(args, "recompute")), loss = nn.CrossEntropy(),
  precision = lamp.precision(args.precision),
  comm = comm, optim = optim, schedule = lamp.lr.cosine { total = total_steps }, seed = args.seed,
  accum = args.accum, metrics = training.metrics(args), shard_optimizer = training.shard_optimizer(args),
}
lamp.log0(tostring(trainer))

local last = training.run(lamp, trainer, loader, test_loader, args)
lamp.log0(string.format("final test accuracy %.2f %%", 100 * last.accuracy))
