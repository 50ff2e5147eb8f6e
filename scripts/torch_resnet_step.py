#!/usr/bin/env python3
"""PyTorch reference for scripts/bench-cpu.sh (CPU) and scripts/gpu-check.sh (GPU): the same ResNet training step
tfbench runs (ResNet-50 v1.5 or resnet-tiny: conv + batch norm (training mode) + ReLU units, bottleneck blocks with
projection shortcuts, max pool, global average pool, FC, cross-entropy, SGD with momentum 0.9) at the same shapes.
Prints the median step time over the timed steps after warm-up. MODE as in torch_bert_step.py; cuda:fp16 is
channels-last AMP (the usual fast recipe), with cuDNN's autotuner on for every GPU mode.
usage: torch_resnet_step.py MODEL BATCH IMAGE THREADS STEPS WARMUP [MODE]
"""
import statistics, sys, time
import torch
import torch.nn as nn
from torch_step import mode_setup, timed_step

CFG = {"resnet50": (7, 2, 64, [3, 4, 6, 3], [64, 128, 256, 512], 1000), "resnet-tiny": (3, 1, 16, [1, 1], [16, 32], 10)}
model, B, image, threads, steps, warmup = sys.argv[1], *map(int, sys.argv[2:7])
dev, amp = mode_setup(sys.argv[7] if len(sys.argv) > 7 else "cpu", threads)
memory_format = torch.channels_last if amp else torch.contiguous_format
k, s, stem, blocks, widths, classes = CFG[model]


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
net = net.to(dev, memory_format=memory_format)
print(f"parameters {sum(p.numel() for p in net.parameters())}", file=sys.stderr)
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
times = []
for step in range(warmup + steps):
    x = torch.randn(B, 3, image, image, device=dev).contiguous(memory_format=memory_format)
    y = torch.randint(0, classes, (B,), device=dev)
    dt = timed_step(dev, amp, opt, lambda: nn.functional.cross_entropy(net(x), y))
    if step >= warmup:
        times.append(dt)
print(f"{statistics.median(times):.6f}")
