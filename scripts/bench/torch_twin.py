#!/usr/bin/env python3
"""PyTorch twin of lamp's CPU training recipes: the other side of the benchmarks in scripts/bench/.

Trains with torch on the CPU what scripts/fmnist_mlp.lua (--arch mlp, 784-1024-1024-10) and
scripts/fmnist_resnet.lua (--arch cnn, the small ResNet of scripts/lib/resnet.lua) train with lamp:
the same layers with PyTorch's default initialisation, Fashion-MNIST normalised as lamp does it
((x/255 - 0.2860) / 0.3530), reshuffled every epoch with the incomplete last batch dropped, batch
128, SGD lr 0.05 momentum 0.9, and the learning rate falling to 0 along lamp's cosine
(lr(s) = 0.05 (1 + cos(pi s / S)) / 2 for step s of S). Prints one line ending
"samples/s=N test_acc=A", the figures the benchmarks parse: training samples per second, all
processes together, timed over the training steps only; and the test accuracy as a fraction.

  python3 scripts/bench/torch_twin.py [--arch mlp|cnn] [--threads T] [--epochs E]
      [--precision fp32|bf16] [--memory-format contiguous|channels_last] [--batch 128] [--seed 0]

--epochs takes fractions: E epochs are floor(E x steps per epoch) optimizer steps, the cosine
spread over them. bf16 runs the forward pass (and the evaluation) under torch.autocast on the CPU;
the weights, their gradients and the optimizer stay fp32, as under lamp's bf16 policy.
--memory-format channels_last (--arch cnn only) keeps the ResNet's weights and every batch in
PyTorch's channels-last layout (NHWC), the one its oneDNN convolutions run fastest on the CPU.
With RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT all set, the process is one rank of
DistributedDataParallel over gloo: --batch is the global batch, every rank takes its share of each
step's samples (the same samples as one process would take), and rank 0 evaluates and prints.
The data come from LAMP_DATA_DIR when set, as for lamp, else from Debian's dataset-fashion-mnist.
"""
import argparse
import gzip
import math
import os
import struct
import sys
import time

DATA_DIR = "/usr/share/datasets/fashion-mnist"
DATA_HINT = "install the Debian package dataset-fashion-mnist, or set LAMP_DATA_DIR"
MEAN, STD = 0.2860, 0.3530
LR, MOMENTUM = 0.05, 0.9
DDP_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class Failure(Exception):
    """A problem the user can fix; main prints it as "torch_twin: <message>"."""


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", choices=["mlp", "cnn"], default="mlp",
                   help="mlp: 784-1024-1024-10; cnn: the small ResNet of scripts/lib/resnet.lua")
    p.add_argument("--threads", type=int, default=1, help="torch's intra-op threads (per process)")
    p.add_argument("--epochs", type=float, default=1.0, help="passes over the training set, fractions allowed")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--memory-format", choices=["contiguous", "channels_last"], default="contiguous",
                   help="the cnn's layout for weights and batches (channels_last: NHWC)")
    p.add_argument("--batch", type=int, default=128, help="the global batch")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.threads < 1 or a.batch < 1:
        p.error(f"--threads and --batch must be >= 1, got --threads {a.threads} --batch {a.batch}")
    if not (a.epochs > 0 and math.isfinite(a.epochs)):
        p.error(f"--epochs must be a number > 0, got {a.epochs}")
    if a.memory_format == "channels_last" and a.arch != "cnn":
        p.error(f"--memory-format channels_last applies to --arch cnn only, got --arch {a.arch}")
    return a


def read_idx(torch, path, ndim):
    """The unsigned-byte IDX file at path (or path.gz) as a uint8 tensor of ndim dimensions."""
    name = path + ".gz" if os.path.exists(path + ".gz") or not os.path.exists(path) else path
    try:
        opener = gzip.open if name.endswith(".gz") else open
        with opener(name, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise Failure(f"cannot read {name}: {e.strerror or e} ({DATA_HINT})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08 or raw[3] != ndim:
        raise Failure(f"{name}: not an unsigned-byte IDX file of {ndim} dimensions (magic {raw[:4].hex()}, "
                      f"expected 000008{ndim:02x})")
    header = 4 + 4 * ndim
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    if len(raw) - header != math.prod(dims):
        raise Failure(f"{name}: the header promises {' x '.join(map(str, dims))} = {math.prod(dims)} bytes, "
                      f"the file holds {len(raw) - header}")
    return torch.frombuffer(bytearray(raw[header:]), dtype=torch.uint8).reshape(dims)


def load_split(torch, split, arch):
    """Images normalised as lamp normalises Fashion-MNIST, shaped for arch, and int64 labels."""
    base = os.path.join(os.environ.get("LAMP_DATA_DIR") or DATA_DIR, split)
    images = read_idx(torch, base + "-images-idx3-ubyte", 3)
    labels = read_idx(torch, base + "-labels-idx1-ubyte", 1)
    if images.shape[0] != labels.shape[0] or tuple(images.shape[1:]) != (28, 28):
        raise Failure(f"{base}: {tuple(images.shape)} images and {labels.shape[0]} labels, "
                      f"expected N x 28 x 28 images and N labels")
    x = (images.float() / 255.0 - MEAN) / STD
    x = x.reshape(-1, 1, 28, 28) if arch == "cnn" else x.reshape(-1, 784)
    return x.contiguous(), labels.long()


def mlp(nn):
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def conv3x3(nn, c_in, c_out):
    return nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)


def resnet(torch):
    """scripts/lib/resnet.lua: BatchNorm at PyTorch's defaults (momentum 0.1, eps 1e-5), lamp's too."""
    nn = torch.nn

    class Residual(nn.Module):
        """relu(x + bn(conv(relu(bn(conv(x))))))"""

        def __init__(self, c):
            super().__init__()
            self.body = nn.Sequential(conv3x3(nn, c, c), nn.BatchNorm2d(c), nn.ReLU(),
                                      conv3x3(nn, c, c), nn.BatchNorm2d(c))

        def forward(self, x):
            return torch.relu(x + self.body(x))

    return nn.Sequential(conv3x3(nn, 1, 16), nn.BatchNorm2d(16), nn.ReLU(), Residual(16), nn.MaxPool2d(2),
                         conv3x3(nn, 16, 32), nn.BatchNorm2d(32), nn.ReLU(), Residual(32),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def join_ddp(torch):
    """(rank, world): (0, 1) without the DDP variables, else this process's place in the gloo group."""
    given = [v for v in DDP_VARIABLES if os.environ.get(v)]
    if not given:
        return 0, 1
    if len(given) != len(DDP_VARIABLES):
        missing = ", ".join(v for v in DDP_VARIABLES if v not in given)
        raise Failure(f"DDP needs all of {', '.join(DDP_VARIABLES)}; {missing} not set")
    torch.distributed.init_process_group("gloo")
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def in_layout(torch, x, memory_format):
    """x as the model takes it: a channels-last copy under --memory-format channels_last."""
    return x.contiguous(memory_format=torch.channels_last) if memory_format == "channels_last" else x


def autocast(torch, precision):
    return torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=precision == "bf16")


def train(torch, a, model, data, rank, world):
    """Runs the steps; returns (steps, seconds, mean training loss of this rank)."""
    x, y = data
    share = a.batch // world
    per_epoch = x.shape[0] // a.batch
    total = int(a.epochs * per_epoch)
    if total < 1:
        raise Failure(f"--epochs {a.epochs} is less than one step ({per_epoch} steps of {a.batch} an epoch)")
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = torch.nn.CrossEntropyLoss()
    order = torch.Generator().manual_seed(a.seed)  # the same on every rank: ranks split one order
    model.train()
    step, loss_sum = 0, 0.0
    start = time.perf_counter()
    while step < total:
        perm = torch.randperm(x.shape[0], generator=order)
        for b in range(min(per_epoch, total - step)):
            first = b * a.batch + rank * share
            idx = perm[first:first + share]
            for g in opt.param_groups:
                g["lr"] = LR * 0.5 * (1.0 + math.cos(math.pi * step / total))
            opt.zero_grad(set_to_none=True)
            with autocast(torch, a.precision):
                loss = loss_fn(model(in_layout(torch, x[idx], a.memory_format)), y[idx])
            loss.backward()
            opt.step()
            loss_sum += loss.item()
            step += 1
    return total, time.perf_counter() - start, loss_sum / total


def evaluate(torch, model, data, precision, memory_format):
    """(mean loss, accuracy) over the test set in batches of 1000, as lamp's evaluation."""
    x, y = data
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad(), autocast(torch, precision):
        for first in range(0, x.shape[0], 1000):
            out = model(in_layout(torch, x[first:first + 1000], memory_format)).float()
            loss_sum += torch.nn.functional.cross_entropy(out, y[first:first + 1000], reduction="sum").item()
            correct += (out.argmax(1) == y[first:first + 1000]).sum().item()
    return loss_sum / x.shape[0], correct / x.shape[0]


def run(torch, a):
    torch.set_num_threads(a.threads)
    rank, world = join_ddp(torch)
    if a.batch % world:
        raise Failure(f"--batch {a.batch} (the global batch) must be a multiple of the {world} ranks")
    torch.manual_seed(a.seed)
    net = resnet(torch) if a.arch == "cnn" else mlp(torch.nn)
    if a.memory_format == "channels_last":
        net = net.to(memory_format=torch.channels_last)
    model = torch.nn.parallel.DistributedDataParallel(net) if world > 1 else net
    train_data = load_split(torch, "train", a.arch)
    test_data = load_split(torch, "t10k", a.arch) if rank == 0 else None
    steps, seconds, train_loss = train(torch, a, model, train_data, rank, world)
    if rank == 0:
        test_loss, accuracy = evaluate(torch, net, test_data, a.precision, a.memory_format)
        print(f"torch_twin: torch {torch.__version__} {a.arch} {a.precision} {a.memory_format}, {world} process(es) x {a.threads} "
              f"thread(s): {steps} steps of {a.batch} in {seconds:.2f} s, train loss {train_loss:.4f}, "
              f"test loss {test_loss:.4f}, samples/s={steps * a.batch / seconds:.0f} test_acc={accuracy:.4f}",
              flush=True)
    if world > 1:
        torch.distributed.barrier()  # the other ranks wait for rank 0's evaluation, then all leave together
        torch.distributed.destroy_process_group()


def main():
    a = parse()
    try:
        import torch
    except ImportError as e:
        print(f"torch_twin: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
        return 2
    try:
        run(torch, a)
    except Failure as e:
        print(f"torch_twin: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
