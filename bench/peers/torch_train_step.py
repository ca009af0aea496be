"""PyTorch eager peer of bench_train_step: the same LLaMA-style model (RMSNorm, RoPE, causal SDPA,
SwiGLU, untied head, no biases) in float32, one optimizer step = forward + backward + clip_grad_norm_
+ AdamW (foreach). Prints "torch tokens_per_s X step_ms Y".

    python torch_train_step.py --vocab V --d D --layers L --heads H --ffn F --seq T --rows B --threads N
        [--pos-emb rope|learned] [--ffn-act swiglu|relu]

On a GPU (the peer of `sinklab-pretrain --device cuda --precision bf16`, bench/run_train_gpu.sh):
    --device cuda [--bf16] [--compile] [--accum A]: bf16 autocast (float32 master weights), SDPA,
    torch.compile, A micro-batches of --rows rows per optimizer step, fused AdamW; times taken after
    torch.cuda.synchronize(); also prints the peak memory PyTorch allocated.

--pos-emb learned --ffn-act relu is the Bigram-Backcopy model (Guo et al. 2024; bench_train_step --set
pos-emb=learned --set ffn=relu): a learned [T, d] position table added to the token embedding, no
RoPE, and a plain FFN down(relu(up(x))).
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, ffn, rope=True, ffn_act="swiglu"):
        super().__init__()
        self.heads, self.dh, self.rope, self.ffn_act = heads, d // heads, rope, ffn_act
        self.norm1, self.norm2 = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate_up = nn.Linear(d, (2 if ffn_act == "swiglu" else 1) * ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, T, 3, self.heads, self.dh).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))

        def rope(t):
            half = t.shape[-1] // 2
            rot = torch.cat((-t[..., half:], t[..., :half]), dim=-1)
            return t * cos + rot * sin

        if self.rope:
            q, k = rope(q), rope(k)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(att.transpose(1, 2).reshape(B, T, d))
        if self.ffn_act == "relu":
            return x + self.down(F.relu(self.gate_up(self.norm2(x))))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Model(nn.Module):
    def __init__(self, vocab, d, layers, heads, ffn, seq, pos_emb="rope", ffn_act="swiglu"):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d) if pos_emb == "learned" else None
        self.blocks = nn.ModuleList(Block(d, heads, ffn, pos_emb == "rope", ffn_act) for _ in range(layers))
        self.norm = nn.RMSNorm(d, eps=1e-5)
        self.head = nn.Linear(d, vocab, bias=False)
        dh = d // heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
        ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)

    def forward(self, ids):
        x = self.embed(ids)
        if self.pos is not None:
            x = x + self.pos.weight[: ids.shape[1]]
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    for k in ("vocab", "d", "layers", "heads", "ffn", "seq", "rows", "threads"):
        p.add_argument(f"--{k}", type=int, required=True)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--pos-emb", choices=("rope", "learned"), default="rope")
    p.add_argument("--ffn-act", choices=("swiglu", "relu"), default="swiglu")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (cuda)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    model = Model(a.vocab, a.d, a.layers, a.heads, a.ffn, a.seq, a.pos_emb, a.ffn_act).to(dev)
    fused = a.device == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            foreach=not fused, fused=fused)
    run = torch.compile(model) if a.compile else model
    ids = torch.randint(0, a.vocab, (a.rows, a.seq), device=dev)
    tgt = torch.randint(0, a.vocab, (a.rows, a.seq), device=dev)
    autocast = torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.bf16)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    total = 0.0
    for s in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for _ in range(a.accum):
            with autocast:
                logits = run(ids)
            loss = F.cross_entropy(logits.float().view(-1, a.vocab), tgt.view(-1)) / a.accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        if s >= a.warmup:
            total += time.perf_counter() - t0
    tokens = a.rows * a.seq * a.accum * a.steps
    extra = ""
    if a.device == "cuda":
        extra = f" peak_mem_gib {torch.cuda.max_memory_allocated() / 2**30:.2f} bf16 {int(a.bf16)} compile {int(a.compile)}"
    print(f"torch tokens_per_s {tokens / total:.1f} step_ms {1e3 * total / a.steps:.2f}{extra}")


if __name__ == "__main__":
    main()
