"""Guo et al.'s own BBM code (model.py, data.py of a clone of GuoTianYu2000/Active-Dormant-Attention, BBM/),
run on a CPU with his README command's setting: 1 layer, 1 head, dim 256, k 3, batch 512,
AdamW lr 3e-4 wd 1e-4 betas (0.9, 0.99) eps 1e-8, seed 42. The training loop is train_main.py's
(set_random_seed, model built right after, loss over every position) minus wandb and checkpoints;
batches are drawn by a vectorised copy of his bbm.gen_seq (same rules and tables: BOS, first token
from the marginal without triggers, after a trigger the token before it, else the bigram row), one
stream np.random.default_rng([seed, 0]) instead of his 24-process queue (his per-token rng.choice
costs ~10 s per 512-row batch on this CPU). BOS attention is measured as his notebooks do: layer 0, head 0, key 0,
mean over non-trigger queries of a fixed batch drawn with default_rng([seed, 27]) (256 rows; his use 512).
Prints one line every 10 steps. PyTorch (the oracle environment) and his repository are needed; nothing of
his is shipped with sinklab.

    python bench/guo/guo_own_run.py GUO_REPO/BBM [seed=42] [steps=400]
"""
import sys, time, math, pickle, random
import numpy as np, torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[1])  # his BBM/: model.py, data.py
import data as guo_data, model as guo_model

seed = int(sys.argv[2]) if len(sys.argv) > 2 else 42
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 400
eval_rows = 256
np.random.seed(seed); torch.manual_seed(seed); random.seed(seed)
meta = pickle.load(open(sys.argv[1] + "/data/bos1_d0/meta.pickle", "rb"))
ds = guo_data.bbm(guo_data.DataArgs(k=3), meta)
args = guo_model.ModelArgs(vocab_size=ds.num_tokens, n_layers=1, n_heads=1, dim=256)
model = guo_model.Transformer(args)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-4, betas=(0.9, 0.99), eps=1e-8)
idxs = torch.tensor([int(i) for i in ds.idxs])
xe = torch.from_numpy(ds.gen_batch(np.random.default_rng([seed, 27]), eval_rows))
xe, ye = xe[:, :-1], xe[:, 1:]
rng = np.random.default_rng([seed, 0])
cond_cdf = np.cumsum(np.asarray(ds.cond, dtype=np.float64), axis=1)
first_cdf = np.cumsum(ds.marginal2)
is_trigger = np.zeros(ds.num_tokens, dtype=bool); is_trigger[[int(i) for i in ds.idxs]] = True

def gen_batch_fast(rows):
    """Vectorised bbm.gen_seq: rows x (seq_length + 1) tokens."""
    n = ds.seq_length + 1
    x = np.empty((rows, n), dtype=np.int64)
    x[:, 0] = ds.bos[0]
    x[:, 1] = np.minimum(np.searchsorted(first_cdf, rng.random(rows) * first_cdf[-1], side="right"), ds.num_tokens - 1)
    for t in range(2, n):
        prev = x[:, t - 1]
        cdf = cond_cdf[prev]
        u = rng.random(rows)[:, None] * cdf[:, -1:]
        drawn = np.minimum((cdf <= u).sum(axis=1), ds.num_tokens - 1)
        x[:, t] = np.where(is_trigger[prev], x[:, t - 2], drawn)
    return x

def evaluate(step, wall):
    with torch.no_grad():
        B, N = xe.shape
        h = model.tok_embeddings(xe) + model.pos_embeddings(torch.arange(N).view(1, N))
        layer = model.layers[0]
        xn = layer.attention_norm(h)
        q, k = layer.attention.wq(xn), layer.attention.wk(xn)
        s = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
        s = s + torch.triu(torch.full((N, N), float("-inf")), diagonal=1)
        a = F.softmax(s, dim=-1)
        trig = torch.isin(xe, idxs)
        bos = a[:, :, 0][~trig].mean().item()
        bos_excl0 = a[:, 1:, 0][~trig[:, 1:]].mean().item()
        pred = model(xe)
        copy = F.cross_entropy(pred[trig], ye[trig]).item()
        bigram = F.cross_entropy(pred[~trig], ye[~trig]).item()
    print(f"step {step:4d} bos_attn {bos:.4f} (queries>0: {bos_excl0:.4f}) copy_loss {copy:.4f} "
          f"bigram_loss {bigram:.4f} wall {wall:.0f}s", flush=True)

t0 = time.time()
for step in range(steps + 1):
    if step % 10 == 0:
        evaluate(step, time.time() - t0)
    if step == steps:
        break
    xb = torch.from_numpy(gen_batch_fast(512))
    x, y = xb[:, :-1], xb[:, 1:]
    opt.zero_grad()
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(0, 1))
    loss.backward()
    opt.step()
