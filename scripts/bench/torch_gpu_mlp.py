#!/usr/bin/env python3
"""PyTorch eager twin of scripts/bench/gpu_mlp.lua, for the GPU check's throughput stage.

Trains the same MLP (784-H1-...-10, ReLU, cross-entropy, SGD lr 0.05 momentum 0.9) on one CUDA
device and prints one line "torch_gpu_mlp: ... samples/s N" for `--steps` steps timed with CUDA
events after `--warmup` untimed ones.

  python3 scripts/bench/torch_gpu_mlp.py [--model mlp|resnet] [--hidden 1024,1024] [--batch 128]
      [--precision fp32|bf16|fp16] [--steps 200] [--warmup 20] [--seed 0]

fp32 runs with TF32 off for matrix products and convolutions (lamp asks cuBLAS for plain fp32
too); bf16 and fp16 run under torch.autocast, fp16 with a GradScaler as PyTorch's recipe has it.
The batches are synthetic (random images and labels made once, already on the GPU): no loader
and no copy from the host, so PyTorch is timed at its best; lamp uploads a real batch per step.
Eager mode only: no torch.compile, no CUDA graphs.
"""
import argparse
import sys


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["mlp", "resnet"], default="mlp",
                   help="the MLP, or the small ResNet of scripts/lib/resnet.lua")
    p.add_argument("--hidden", default="1024,1024", help="hidden widths, comma-separated (mlp)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    try:
        a.sizes = [int(h) for h in a.hidden.split(",")]
    except ValueError:
        p.error(f"--hidden: expected widths separated by commas, got {a.hidden}")
    if a.batch < 1 or a.steps < 1 or a.warmup < 0 or min(a.sizes) < 1:
        p.error("--batch, --steps and the widths must be >= 1, --warmup >= 0")
    return a


class Block:
    """relu(x + bn(conv(relu(bn(conv(x)))))), every convolution 3x3, padding 1, no bias."""

    @staticmethod
    def make(torch, c):
        nn = torch.nn

        class _Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                                          nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))

            def forward(self, x):
                return torch.relu(x + self.body(x))

        return _Block()


def resnet_of(torch, widths=(16, 32)):
    """The small ResNet lamp's scripts train (scripts/lib/resnet.lua), for 1x28x28 images."""
    nn = torch.nn
    w1, w2 = widths
    return nn.Sequential(
        nn.Conv2d(1, w1, 3, padding=1, bias=False), nn.BatchNorm2d(w1), nn.ReLU(), Block.make(torch, w1),
        nn.MaxPool2d(2),
        nn.Conv2d(w1, w2, 3, padding=1, bias=False), nn.BatchNorm2d(w2), nn.ReLU(), Block.make(torch, w2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w2, 10))


def model_of(torch, sizes):
    layers, width = [], 784
    for h in sizes:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*layers)


def main():
    a = parse()
    try:
        import torch
    except ImportError as e:
        print(f"torch_gpu_mlp: PyTorch is not installed for {sys.executable}: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("torch_gpu_mlp: PyTorch sees no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(a.seed)
    dev = torch.device("cuda")

    model = (resnet_of(torch) if a.model == "resnet" else model_of(torch, a.sizes)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[a.precision]
    scaler = torch.amp.GradScaler("cuda", enabled=a.precision == "fp16")

    # A pool of batches, cycled, so the steps do not see one batch only.
    pool = 8
    shape = (pool, a.batch, 1, 28, 28) if a.model == "resnet" else (pool, a.batch, 784)
    images = torch.randn(*shape, device=dev)
    labels = torch.randint(0, 10, (pool, a.batch), device=dev)

    def step(i):
        x, y = images[i % pool], labels[i % pool]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    for i in range(a.warmup):
        step(i)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(a.steps):
        loss = step(i)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000.0
    what = "resnet" if a.model == "resnet" else f"mlp 784-{'-'.join(map(str, a.sizes))}-10"
    print(f"torch_gpu_mlp: torch {torch.__version__} on {torch.cuda.get_device_name()} precision {a.precision} "
          f"{what} batch {a.batch}: {a.steps} steps, {seconds:.3f} s, "
          f"loss {loss.item():.4f}, samples/s {a.steps * a.batch / seconds:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
