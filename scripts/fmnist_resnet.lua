-- Trains the small ResNet of scripts/lib/resnet.lua on Fashion-MNIST (its PyTorch twin:
-- scripts/bench/torch_twin.py --arch cnn) and reports test accuracy per epoch and the memory ledger.
--
--   build/lamp scripts/fmnist_resnet.lua [--epochs=3] [--batch=128] [--seed=0]
--       [--precision=fp32|fp16|bf16] [--comm=auto] [--optim=sgd|adam|adamw] [--lr=] [--momentum=0.9]
--       [--wd=] [--accum=1] [--clip=0] [--schedule=cosine|constant] [--limit=N]
--       [--save=DIR] [--save_every=STEPS] [--keep=3] [--resume=DIR] [--start_over] [--metrics=FILE]
--       [--zero=0|1] [--recompute]
--
-- --save, --resume, --start_over, --metrics and --zero work as in scripts/fmnist_mlp.lua. --recompute wraps
-- each of the two stages in nn.Recompute: less activation memory, a forward more per step, the
-- same bits and the same parameter names (a run resumes the other's checkpoints).
-- The default recipe is the reference one: SGD lr 0.05, momentum 0.9, batch 128, the learning
-- rate falling to 0 along a cosine over the run (PyTorch reaches 89.7 % after 3 epochs).
-- Images are [1, 28, 28], normalised as the reference does ((x/255 - 0.2860) / 0.3530).
-- BatchNorm's weights, biases and running statistics stay fp32 under every policy, and are
-- exempt from weight decay. --batch is the global batch (see scripts/lamp-run).
package.path = arg[0]:gsub("[^/]*$", "") .. "lib/?.lua;" .. package.path
local lamp = require "lamp"
local resnet = require "resnet"
local training = require "training"
local nn = lamp.nn

local args = lamp.parse_args(arg, {
  epochs = 3, batch = 128, lr = "auto", momentum = 0.9, wd = "auto", seed = 0, precision = "fp32",
  comm = "auto", optim = "sgd", schedule = "cosine", accum = 1, clip = 0, limit = 0, data = "fashion-mnist",
  save = "", save_every = 0, keep = 3, resume = "", start_over = false, bucket_mb = 25, device = "cpu",
  metrics = "", zero = 0, recompute = false,
})

lamp.device(args.device) -- before the communicator: "auto" asks the plugins, which see the run device
local comm = lamp.comm(args.comm)
local precision = lamp.precision(args.precision)
local optim = training.optimizer(lamp, args)

local train = lamp.data.idx(args.data, "train")
local test = lamp.data.idx(args.data, "t10k")
train = training.limit(train, args.limit)
local loader = lamp.data.loader(train, { batch = training.rank_batch(args.batch, comm), shuffle = true, drop_last = true,
                                         seed = args.seed, comm = comm })
local test_loader = lamp.data.loader(test, { batch = 500 })

local model = resnet.build(nn, 1, train:classes(), nil, training.flag(args, "recompute"))
local total_steps = loader:batches() * args.epochs // args.accum
if args.schedule ~= "cosine" and args.schedule ~= "constant" then
  error("--schedule: expected cosine or constant, got " .. tostring(args.schedule), 0)
end
local trainer = lamp.Trainer {
  model = model, loss = nn.CrossEntropy(), precision = precision, comm = comm, optim = optim,
  schedule = args.schedule == "cosine" and lamp.lr.cosine { total = total_steps } or lamp.lr.constant(),
  seed = args.seed, accum = args.accum, clip = args.clip, bucket_mb = args.bucket_mb,
  metrics = training.metrics(args), shard_optimizer = training.shard_optimizer(args),
}
lamp.log0(tostring(model))
lamp.log0(string.format("%d parameters, %d training samples, batch %d x accum %d, %d optimizer steps, %s %s %s",
  trainer:parameters(), train:size(), args.batch, args.accum, total_steps, precision:name(), comm:name(), optim:name()))

local last = training.run(lamp, trainer, loader, test_loader, args)
if comm:rank() == 0 then
  training.print_memory(lamp)
  print(string.format("final test accuracy %.2f %%", 100 * last.accuracy))
end
