#!/usr/bin/env python3
"""PyTorch reference for scripts/bench-cpu.sh (CPU) and scripts/gpu-check.sh (GPU): the same BERT pre-training step
tfbench runs (post-LN encoder, MLM head on the masked positions with the decoder tied to the word embedding, NSP
head, AdamW, dropout 0.1) at the same shapes. Prints the median step time over the timed steps after warm-up.
MODE: cpu (FP32 on THREADS threads, the default), or on the GPU cuda:fp32 (no TF32), cuda:tf32, or cuda:fp16
(eager AMP: autocast to FP16 with a dynamic loss scaler). On the GPU the inputs are drawn on the device before the
clock starts, and the device is synchronised at both ends of every timed step.
usage: torch_bert_step.py MODEL BATCH SEQ THREADS STEPS WARMUP [MODE]
"""
import statistics, sys, time
import torch
import torch.nn as nn
from torch_step import mode_setup, timed_step

CFG = {"bert-tiny": (2, 128, 2), "bert-mini": (4, 256, 4), "bert-small": (4, 512, 8), "bert-medium": (8, 512, 8),
       "bert-base": (12, 768, 12), "bert-large": (24, 1024, 16)}
model, B, S, threads, steps, warmup = sys.argv[1], *map(int, sys.argv[2:7])
dev, amp = mode_setup(sys.argv[7] if len(sys.argv) > 7 else "cpu", threads)
L, H, A = CFG[model]
V, P = 30522, (S * 20 + 64) // 128
torch.manual_seed(0)


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        self.word, self.pos, self.tt = nn.Embedding(V, H), nn.Embedding(512, H), nn.Embedding(2, H)
        self.ln = nn.LayerNorm(H, eps=1e-12)
        layer = nn.TransformerEncoderLayer(H, A, 4 * H, dropout=0.1, activation="gelu", batch_first=True, norm_first=False)
        layer.norm1.eps = layer.norm2.eps = 1e-12
        self.enc = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.pool, self.mlm, self.mlm_ln = nn.Linear(H, H), nn.Linear(H, H), nn.LayerNorm(H, eps=1e-12)
        self.dec_b, self.nsp, self.drop = nn.Parameter(torch.zeros(V)), nn.Linear(H, 2), nn.Dropout(0.1)

    def forward(self, ids, types, rows, labels, nsp):
        pos = torch.arange(S, device=ids.device).expand(B, S)
        x = self.enc(self.drop(self.ln(self.word(ids) + self.pos(pos) + self.tt(types))))
        m = self.mlm_ln(nn.functional.gelu(self.mlm(x.reshape(B * S, H)[rows])))
        logits = m @ self.word.weight.T + self.dec_b
        n = self.nsp(torch.tanh(self.pool(x[:, 0])))
        return nn.functional.cross_entropy(logits, labels) + nn.functional.cross_entropy(n, nsp)


net = Bert().to(dev)
opt = torch.optim.AdamW(net.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)
print(f"parameters {sum(p.numel() for p in net.parameters())}", file=sys.stderr)
times = []
for step in range(warmup + steps):
    ids, types = torch.randint(999, V, (B, S), device=dev), (torch.arange(S, device=dev) >= S // 2).long().expand(B, S)
    rows = (torch.randint(1, S, (B, P), device=dev) + torch.arange(B, device=dev)[:, None] * S).reshape(-1)
    labels, nsp = torch.randint(999, V, (B * P,), device=dev), torch.randint(0, 2, (B,), device=dev)
    dt = timed_step(dev, amp, opt, lambda: net(ids, types, rows, labels, nsp))
    if step >= warmup:
        times.append(dt)
print(f"{statistics.median(times):.6f}")
