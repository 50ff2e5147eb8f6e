#!/usr/bin/env python3
"""PyTorch CPU reference for scripts/bench-cpu.sh: the same BERT pre-training step tfbench runs (post-LN encoder,
MLM head on the masked positions with the decoder tied to the word embedding, NSP head, AdamW, dropout 0.1, FP32)
at the same shapes and thread count. Prints the median step time over the timed steps after warm-up.
usage: torch_bert_step.py MODEL BATCH SEQ THREADS STEPS WARMUP
"""
import statistics, sys, time
import torch
import torch.nn as nn

CFG = {"bert-tiny": (2, 128, 2), "bert-mini": (4, 256, 4), "bert-small": (4, 512, 8), "bert-medium": (8, 512, 8),
       "bert-base": (12, 768, 12), "bert-large": (24, 1024, 16)}
model, B, S, threads, steps, warmup = sys.argv[1], *map(int, sys.argv[2:7])
L, H, A = CFG[model]
V, P = 30522, (S * 20 + 64) // 128
torch.set_num_threads(threads)
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
        pos = torch.arange(S).expand(B, S)
        x = self.enc(self.drop(self.ln(self.word(ids) + self.pos(pos) + self.tt(types))))
        m = self.mlm_ln(nn.functional.gelu(self.mlm(x.reshape(B * S, H)[rows])))
        logits = m @ self.word.weight.T + self.dec_b
        n = self.nsp(torch.tanh(self.pool(x[:, 0])))
        return nn.functional.cross_entropy(logits, labels) + nn.functional.cross_entropy(n, nsp)


net = Bert()
opt = torch.optim.AdamW(net.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)
print(f"parameters {sum(p.numel() for p in net.parameters())}", file=sys.stderr)
times = []
for step in range(warmup + steps):
    ids, types = torch.randint(999, V, (B, S)), (torch.arange(S) >= S // 2).long().expand(B, S)
    rows = (torch.randint(1, S, (B, P)) + torch.arange(B)[:, None] * S).reshape(-1)
    labels, nsp = torch.randint(999, V, (B * P,)), torch.randint(0, 2, (B,))
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    net(ids, types, rows, labels, nsp).backward()
    opt.step()
    if step >= warmup:
        times.append(time.perf_counter() - t0)
print(f"{statistics.median(times):.6f}")
