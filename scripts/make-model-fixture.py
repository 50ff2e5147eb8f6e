#!/usr/bin/env python3
"""Writes tests/fixtures/bert_tiny/: the loss and gradients of one whole bert-tiny training step computed by
PyTorch in float64 from tfbench's own dump (initial parameters and first batch), the independent reference for the
embeddings, the tied MLM decoder, the NSP head and the loss normalisation that tests/test_training.py compares
tfbench's first-step gradients with.

The run: build/tfbench --model bert-tiny --seq-len 16 --batch 2 --masked 3 --dropout 0 --steps 1 --warmup 0.
Stored (to keep the fixture small): every bias and LayerNorm gradient, layer 0's weight gradients, the heads,
the position and token-type embeddings, and the word-embedding gradient rows of the tokens the batch touches.
Run with Debian's python3-torch after `make`:  python3 scripts/make-model-fixture.py
"""
import glob, json, os, subprocess, sys, tempfile
import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ARGS = ["--model", "bert-tiny", "--seq-len", "16", "--batch", "2", "--masked", "3", "--dropout", "0", "--steps", "1",
        "--warmup", "0", "--peak-tflops", "1", "--progress", "off", "--threads", "1"]
OUT = os.path.join(ROOT, "tests", "fixtures", "bert_tiny")
H, A, L, S, B = 128, 2, 2, 16, 2

d = tempfile.mkdtemp()
subprocess.run([os.path.join(ROOT, "build", "tfbench")] + ARGS + ["--dump", d, "--output", d + "/r.json"], check=True,
               stdout=subprocess.DEVNULL)
loss_tfbench = json.load(open(d + "/r.json"))["configurations"][0]["per_step"]["loss_all_steps_including_warmup"][0]
P = {os.path.basename(f)[6:-4]: torch.tensor(np.load(f), dtype=torch.float64, requires_grad=True)
     for f in glob.glob(d + "/param.*.npy")}
batch = {k: torch.tensor(np.load(f"{d}/batch.{k}.npy")).long() for k in
         ("input_ids", "token_type_ids", "mlm_rows", "mlm_labels", "nsp_labels")}
ln = lambda x, p: torch.nn.functional.layer_norm(x, (H,), P[p + ".gamma"], P[p + ".beta"], eps=1e-12)
lin = lambda x, p: x @ P[p + ".weight"].T + P[p + ".bias"]
gelu = torch.nn.functional.gelu

ids, types = batch["input_ids"].reshape(-1), batch["token_type_ids"].reshape(-1)
x = ln(P["emb.word"][ids] + P["emb.position"][torch.arange(S).repeat(B)] + P["emb.token_type"][types], "emb.ln")
for l in range(L):
    p = f"layer.{l}."
    q, k, v = (t.reshape(B, S, A, H // A).permute(0, 2, 1, 3) for t in lin(x, p + "attn.qkv").split(H, dim=1))
    ctx = (torch.softmax(q @ k.transpose(-1, -2) / (H // A) ** 0.5, -1) @ v).permute(0, 2, 1, 3).reshape(B * S, H)
    x = ln(x + lin(ctx, p + "attn.out"), p + "attn.ln")
    x = ln(x + lin(gelu(lin(x, p + "ffn.up")), p + "ffn.down"), p + "ffn.ln")
m = ln(gelu(lin(x[batch["mlm_rows"].reshape(-1)], "mlm.transform")), "mlm.ln")
logits = m @ P["emb.word"].T + P["mlm.decoder.bias"]
nsp = lin(torch.tanh(lin(x[torch.arange(B) * S], "pooler")), "nsp")
loss = (torch.nn.functional.cross_entropy(logits, batch["mlm_labels"].reshape(-1)) +
        torch.nn.functional.cross_entropy(nsp, batch["nsp_labels"].reshape(-1)))
loss.backward()
print(f"loss: pytorch float64 {loss.item():.8f}, tfbench {loss_tfbench:.8f}")

os.makedirs(OUT, exist_ok=True)
for f in glob.glob(OUT + "/*.npy"):
    os.remove(f)
keep = lambda n: (not n.endswith("weight") or n.startswith(("layer.0.", "pooler", "mlm", "nsp"))) and n != "emb.word"
for name, t in P.items():
    if keep(name):
        np.save(f"{OUT}/grad.{name}.npy", t.grad.numpy().astype(np.float32))
rows = np.unique(np.concatenate([ids.numpy(), batch["mlm_labels"].numpy().reshape(-1)])).astype(np.int32)
np.save(f"{OUT}/word_rows.npy", rows)
np.save(f"{OUT}/grad.emb.word.rows.npy", P["emb.word"].grad[rows].numpy().astype(np.float32))
np.save(f"{OUT}/loss.npy", np.array([loss.item()], dtype=np.float32))
json.dump({"tfbench_args": ARGS}, open(f"{OUT}/run.json", "w"), indent=1)
print("wrote", OUT)
