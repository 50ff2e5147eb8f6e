#!/usr/bin/env python3
"""Writes tests/fixtures/bert_layer/*.npy: one post-LN BERT encoder layer computed by PyTorch, the independent
reference tests/test_bert_layer.c compares tfbench's CPU kernels with.

Shapes: batch 2, sequence 8, hidden 32, 4 heads, FFN 128; key lengths (8, 5) masked additively; dropout off;
exact (erf) GELU; LayerNorm eps 1e-12. The loss is sum(y * dy), so the input and weight gradients are those of
an incoming gradient dy. Run with Debian's python3-torch:  python3 scripts/make-layer-fixture.py
"""
import os
import numpy as np
import torch

B, S, H, A, F = 2, 8, 32, 4, 128
D = H // A
out = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "bert_layer")
os.makedirs(out, exist_ok=True)
g = torch.Generator().manual_seed(20261202)


def rnd(*shape, scale=1.0):
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).float().requires_grad_(True)


w = {
    "qkv_w": rnd(3 * H, H, scale=0.2), "qkv_b": rnd(3 * H, scale=0.1),
    "ao_w": rnd(H, H, scale=0.2), "ao_b": rnd(H, scale=0.1),
    "ln1_g": (1 + rnd(H, scale=0.1)).detach().requires_grad_(True), "ln1_b": rnd(H, scale=0.1),
    "ff1_w": rnd(F, H, scale=0.2), "ff1_b": rnd(F, scale=0.1),
    "ff2_w": rnd(H, F, scale=0.1), "ff2_b": rnd(H, scale=0.1),
    "ln2_g": (1 + rnd(H, scale=0.1)).detach().requires_grad_(True), "ln2_b": rnd(H, scale=0.1),
}
x = rnd(B * S, H)
dy = rnd(B * S, H)
key_len = torch.tensor([8, 5])

qkv = x @ w["qkv_w"].T + w["qkv_b"]
q, k, v = (t.reshape(B, S, A, D).permute(0, 2, 1, 3) for t in qkv.split(H, dim=1))
mask = torch.where(torch.arange(S)[None, :] < key_len[:, None], 0.0, float("-inf"))  # (B, S) over keys
scores = q @ k.transpose(-1, -2) / D ** 0.5 + mask[:, None, None, :]
ctx = (torch.softmax(scores, dim=-1) @ v).permute(0, 2, 1, 3).reshape(B * S, H)
h1 = x + ctx @ w["ao_w"].T + w["ao_b"]
x1 = torch.nn.functional.layer_norm(h1, (H,), w["ln1_g"], w["ln1_b"], eps=1e-12)
u = x1 @ w["ff1_w"].T + w["ff1_b"]
h2 = x1 + torch.nn.functional.gelu(u) @ w["ff2_w"].T + w["ff2_b"]
y = torch.nn.functional.layer_norm(h2, (H,), w["ln2_g"], w["ln2_b"], eps=1e-12)
(y * dy).sum().backward()

save = lambda name, t: np.save(os.path.join(out, name + ".npy"), t.detach().numpy().astype(np.float32))
save("x", x); save("dy", dy); save("y", y); save("dx", x.grad)
for name, t in w.items():
    save(name, t)
    save("d" + name, t.grad)
print("wrote", out)
