#!/usr/bin/env python3
"""PyTorch CPU reference for scripts/bench-cpu.sh: the same ResNet training step tfbench runs (ResNet-50 v1.5 or
resnet-tiny: conv + batch norm (training mode) + ReLU units, bottleneck blocks with projection shortcuts, max pool,
global average pool, FC, cross-entropy, SGD with momentum 0.9, FP32) at the same shapes and thread count. Prints
the median step time over the timed steps after warm-up.
usage: torch_resnet_step.py MODEL BATCH IMAGE THREADS STEPS WARMUP
"""
import statistics, sys, time
import torch
import torch.nn as nn

CFG = {"resnet50": (7, 2, 64, [3, 4, 6, 3], [64, 128, 256, 512], 1000), "resnet-tiny": (3, 1, 16, [1, 1], [16, 32], 10)}
model, B, image, threads, steps, warmup = sys.argv[1], *map(int, sys.argv[2:7])
k, s, stem, blocks, widths, classes = CFG[model]
torch.set_num_threads(threads)


def unit(cin, cout, r, stride, relu=True):
    layers = [nn.Conv2d(cin, cout, r, stride, r // 2, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU(inplace=True)) if relu else nn.Sequential(*layers)


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        out = 4 * width
        self.main = nn.Sequential(unit(cin, width, 1, 1), unit(width, width, 3, stride), unit(width, out, 1, 1, False))
        self.proj = unit(cin, out, 1, stride, False) if stride != 1 or cin != out else nn.Identity()

    def forward(self, x):
        return torch.relu(self.main(x) + self.proj(x))


layers, cin = [unit(3, stem, k, s), nn.MaxPool2d(3, 2, 1)], stem
for i, (n, w) in enumerate(zip(blocks, widths)):
    for j in range(n):
        layers.append(Bottleneck(cin, w, 2 if j == 0 and i > 0 else 1))
        cin = 4 * w
net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))
print(f"parameters {sum(p.numel() for p in net.parameters())}", file=sys.stderr)
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
times = []
for step in range(warmup + steps):
    x, y = torch.randn(B, 3, image, image), torch.randint(0, classes, (B,))
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
    if step >= warmup:
        times.append(time.perf_counter() - t0)
print(f"{statistics.median(times):.6f}")
