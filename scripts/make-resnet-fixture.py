#!/usr/bin/env python3
"""Writes tests/fixtures/resnet_tiny/ and tests/fixtures/resnet18/: the loss and parameter gradients of one
training step computed by PyTorch in float64 from tfbench's own dump (initial parameters and first batch): the
independent reference for the convolutions, training-mode batch norm, bottleneck blocks (resnet-tiny; stride on
the 3x3 as ResNet-50 v1.5) and basic blocks (resnet18 at 64x64, so the last stage still normalises over 16 values) with projection shortcuts, max pool, global average
pool, the FC layer and the loss, which tests/test_training.py compares tfbench's first-step gradients with.
resnet-tiny keeps every gradient; resnet18 (11.7M parameters) keeps batch norm, the stem, stage 1 and the FC bias.

Run with Debian's python3-torch after `make`:  python3 scripts/make-resnet-fixture.py
"""
import glob, json, os, subprocess, tempfile
import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODELS = {  # stem (kernel, stride, width), bottleneck, blocks, widths, classes, batch, image, kept gradients
    "resnet-tiny": ((3, 1, 16), True, [1, 1], [16, 32], 10, 4, 32, lambda n: True),
    "resnet18": ((7, 2, 64), False, [2, 2, 2, 2], [64, 128, 256, 512], 1000, 4, 64,
                 lambda n: ".bn." in n or n.startswith(("stem", "stage1")) or n == "fc.bias"),
}


def unit(P, x, name, cin, r, stride, relu):
    w = P[name + ".conv.weight"]
    y = F.conv2d(x, w.reshape(w.shape[0], cin, r, r), stride=stride, padding=r // 2)
    y = F.batch_norm(y, None, None, P[name + ".bn.gamma"].reshape(-1), P[name + ".bn.beta"].reshape(-1),
                     training=True, eps=1e-5)
    return F.relu(y) if relu else y


def block(P, x, name, cin, width, stride, bottleneck):
    out = 4 * width if bottleneck else width
    if bottleneck:
        y = unit(P, x, name + ".u0", cin, 1, 1, True)
        y = unit(P, y, name + ".u1", width, 3, stride, True)
        y = unit(P, y, name + ".u2", width, 1, 1, False)
    else:
        y = unit(P, x, name + ".u0", cin, 3, stride, True)
        y = unit(P, y, name + ".u1", width, 3, 1, False)
    shortcut = unit(P, x, name + ".proj", cin, 1, stride, False) if stride != 1 or cin != out else x
    return F.relu(y + shortcut), out


def fixture(model):
    (k, s, width), bottleneck, blocks, widths, classes, batch, image, keep = MODELS[model]
    args = ["--model", model, "--batch", str(batch), "--image-size", str(image), "--steps", "1", "--warmup", "0",
            "--peak-tflops", "1", "--progress", "off", "--threads", "1"]
    out = os.path.join(ROOT, "tests", "fixtures", model.replace("-", "_"))
    d = tempfile.mkdtemp()
    subprocess.run([os.path.join(ROOT, "build", "tfbench")] + args + ["--dump", d, "--output", d + "/r.json"],
                   check=True, stdout=subprocess.DEVNULL)
    loss_tfbench = json.load(open(d + "/r.json"))["per_step"]["loss_all_steps_including_warmup"][0]
    P = {os.path.basename(f)[6:-4]: torch.tensor(np.load(f), dtype=torch.float64, requires_grad=True)
         for f in glob.glob(d + "/param.*.npy")}
    x = torch.tensor(np.load(d + "/batch.images.npy"), dtype=torch.float64).reshape(batch, 3, image, image)
    labels = torch.tensor(np.load(d + "/batch.labels.npy")).long().reshape(-1)
    h, cin = F.max_pool2d(unit(P, x, "stem", 3, k, s, True), 3, 2, 1), width
    for i, (n, w) in enumerate(zip(blocks, widths)):
        for j in range(n):
            h, cin = block(P, h, f"stage{i + 1}.block{j}", cin, w, 2 if j == 0 and i > 0 else 1, bottleneck)
    logits = h.mean(dim=(2, 3)) @ P["fc.weight"].T + P["fc.bias"].reshape(-1)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    print(f"{model} loss: pytorch float64 {loss.item():.8f}, tfbench {loss_tfbench:.8f}")
    os.makedirs(out, exist_ok=True)
    for f in glob.glob(out + "/*.npy"):
        os.remove(f)
    for name, t in P.items():
        if keep(name):
            np.save(f"{out}/grad.{name}.npy", t.grad.numpy().astype(np.float32))
    np.save(f"{out}/loss.npy", np.array([loss.item()], dtype=np.float32))
    json.dump({"tfbench_args": args}, open(f"{out}/run.json", "w"), indent=1)
    print("wrote", out)


for m in MODELS:
    fixture(m)
