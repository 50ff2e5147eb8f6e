#!/usr/bin/env python3
"""Writes tests/fixtures/resnet_tiny/: the loss and every parameter gradient of one resnet-tiny training step
computed by PyTorch in float64 from tfbench's own dump (initial parameters and first batch): the independent
reference for the convolutions, training-mode batch norm, bottleneck blocks with projection shortcuts (stride on
the 3x3, as ResNet-50 v1.5), max pool, global average pool, the FC layer and the loss that tests/test_training.py
compares tfbench's first-step gradients with.

Run with Debian's python3-torch after `make`:  python3 scripts/make-resnet-fixture.py
"""
import glob, json, os, subprocess, tempfile
import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ARGS = ["--model", "resnet-tiny", "--batch", "4", "--steps", "1", "--warmup", "0", "--peak-tflops", "1",
        "--progress", "off", "--threads", "1"]
OUT = os.path.join(ROOT, "tests", "fixtures", "resnet_tiny")

d = tempfile.mkdtemp()
subprocess.run([os.path.join(ROOT, "build", "tfbench")] + ARGS + ["--dump", d, "--output", d + "/r.json"], check=True,
               stdout=subprocess.DEVNULL)
loss_tfbench = json.load(open(d + "/r.json"))["per_step"]["loss_all_steps_including_warmup"][0]
P = {os.path.basename(f)[6:-4]: torch.tensor(np.load(f), dtype=torch.float64, requires_grad=True)
     for f in glob.glob(d + "/param.*.npy")}
x = torch.tensor(np.load(d + "/batch.images.npy"), dtype=torch.float64).reshape(4, 3, 32, 32)
labels = torch.tensor(np.load(d + "/batch.labels.npy")).long().reshape(-1)


def unit(x, name, cin, r, stride, relu):
    w = P[name + ".conv.weight"]
    y = F.conv2d(x, w.reshape(w.shape[0], cin, r, r), stride=stride, padding=r // 2)
    y = F.batch_norm(y, None, None, P[name + ".bn.gamma"].reshape(-1), P[name + ".bn.beta"].reshape(-1),
                     training=True, eps=1e-5)
    return F.relu(y) if relu else y


def bottleneck(x, name, cin, width, stride):
    y = unit(x, name + ".u0", cin, 1, 1, True)
    y = unit(y, name + ".u1", width, 3, stride, True)
    y = unit(y, name + ".u2", width, 1, 1, False)
    return F.relu(y + unit(x, name + ".proj", cin, 1, stride, False))


h = F.max_pool2d(unit(x, "stem", 3, 3, 1, True), 3, 2, 1)
h = bottleneck(h, "stage1.block0", 16, 16, 1)
h = bottleneck(h, "stage2.block0", 64, 32, 2)
logits = h.mean(dim=(2, 3)) @ P["fc.weight"].T + P["fc.bias"].reshape(-1)
loss = F.cross_entropy(logits, labels)
loss.backward()
print(f"loss: pytorch float64 {loss.item():.8f}, tfbench {loss_tfbench:.8f}")

os.makedirs(OUT, exist_ok=True)
for f in glob.glob(OUT + "/*.npy"):
    os.remove(f)
for name, t in P.items():
    np.save(f"{OUT}/grad.{name}.npy", t.grad.numpy().astype(np.float32))
np.save(f"{OUT}/loss.npy", np.array([loss.item()], dtype=np.float32))
json.dump({"tfbench_args": ARGS}, open(f"{OUT}/run.json", "w"), indent=1)
print("wrote", OUT)
