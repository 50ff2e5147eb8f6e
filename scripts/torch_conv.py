#!/usr/bin/env python3
"""PyTorch's CPU convolution (oneDNN in Debian's build) forward + backward on the shapes scripts/bench_conv.c
prints, read from standard input ("c h k r stride tfbench_ms" lines); prints each line with PyTorch's median ms
appended. usage: torch_conv.py THREADS < file written by bench_conv (run them one after the other, not in a pipe, so they
do not share the cores)"""
import statistics, sys, time
import torch

torch.set_num_threads(int(sys.argv[1]))
for line in sys.stdin:
    c, h, k, r, s, ms = line.split()
    c, h, k, r, s = map(int, (c, h, k, r, s))
    x = torch.full((2, c, h, h), 0.5, requires_grad=True)
    w = torch.full((k, c, r, r), 0.01, requires_grad=True)
    t = []
    for rep in range(6):
        t0 = time.perf_counter()
        y = torch.nn.functional.conv2d(x, w, stride=s, padding=r // 2)
        y.backward(y.detach())
        if rep:
            t.append(time.perf_counter() - t0)
    print(f"{c:5d} {h:4d} {k:5d} {r}x{r}/{s} {float(ms):10.2f} {1e3 * statistics.median(t):10.2f} {1e3 * statistics.median(t) / float(ms):6.2f}x")
