"""A PyTorch twin of a sinklab-pretrain run: starts from the run's step-0 weights, replays the exact
rows every optimizer step read, evaluates at the same steps as the run did, and compares the two
(issue #25, "long-run equivalence with PyTorch").

The run must have been made with `--checkpoint-at-start --record-batches` (and the step-0 checkpoint
kept: --keep-checkpoints large enough, or --checkpoint-every 0). Everything else comes from the run:
results.h5 /runs/<run> attribute "config" (the ini text of every option) gives the model, the data,
the optimizer and the evaluation; /runs/<run>/batches/rows the rows of each step; /eval/step the
steps to evaluate at.

The model is the explicit reference module of the golden tests (tests/python/goldens/
gen_model_variants.py: `Cfg`, `forward`), imported, not rewritten; it runs in --dtype float32 (as
sinklab's trainer) or float64 (separates float chaos from a difference in semantics). In float32 the
module's float64 constants (RoPE's cos/sin, masks' fills) are made float32 (RoPE's tables still formed
in float64 and rounded once, as sinklab's rope op does).

What is replayed, as sinklab does it (src/train/):
  rows    chunk c = tokens [cC, cC+C+1) of the packed stream of --train-data's shards in order, or with
          --document-rows the first C+1 tokens of document c (documents end with EOS); inputs the first
          C, targets the last C; --fixed-token-position P sets token P (1-based) of every training row
          to --fixed-token-id (--resample-positions is refused: its Philox draws are not replicated)
  loss    mean cross-entropy over the global batch's targets (every target counts in pre-training)
  clip    coefficient max_norm / (norm + 1e-6) when norm > max_norm (torch's clip_grad_norm_)
  AdamW   torch.optim.AdamW (foreach=False), weight decay on the matrices only (src/model/config.cpp
          param_layout: kind "matrix"; gains, biases, sink token/logits, relative bias tables do not decay)
  lr      linear warmup lr (s+1)/W for step s < W, then constant or cosine to --min-lr (schedule.cpp)
  eval    valid loss over the first --eval-rows rows of --valid-data (BBM: copy and bigram losses);
          the probe on the first --probe-sequences rows cut to --probe-length tokens: alpha_1 per head
          (the sample mean of mean_i A[i, 0]), the attention to the first token pooled over the queries
          of each group (BBM: 0 = non-trigger incl. the BOS query = Guo's BOS attention, 1 = trigger);
          runs with an intervention also probe with it applied (alpha_k_intervened).

Usage (the oracle venv):
    .venv-oracle/bin/python bench/twin/replay.py RUN_DIR [--run NAME] [--dtype float32|float64]
        [--threads 2] [--json OUT.json] [--max-loss-rel 0.01] [--max-attn-abs 0.02]
Exit status 0 when every bound holds, 1 when one does not, 2 on a usage error.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import struct
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python" / "goldens"))
import gen_model_variants as ref  # noqa: E402  (the golden tests' reference model)

ref_rope_f64 = ref.rope


class UsageError(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# The run's settings


def parse_ini(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def data_path(p: str) -> str:
    """A data path of the run's config: as given (relative to where sinklab ran), else under the repository."""
    if os.path.isabs(p) or os.path.exists(p):
        return p
    if (ROOT / p).exists():
        return str(ROOT / p)
    raise UsageError(f"{p}: not found (run the twin from the directory sinklab-pretrain ran in)")


def as_bool(v: str) -> bool:
    return v.lower() in ("1", "true", "yes", "on")


def ref_config(ini: dict[str, str]) -> "ref.Cfg":
    dims = dict(vocab=int(ini["vocab-size"]), d=int(ini["d-model"]), layers=int(ini["n-layers"]),
                heads=int(ini["n-heads"]), kv_heads=int(ini.get("n-kv-heads", "0")), ffn=int(ini["ffn-hidden"]),
                context=int(ini["context"]), norm_eps=float(ini.get("norm-eps", "1e-5")),
                rope_theta=float(ini.get("rope-theta", "10000")))
    axes = {k: ini[k] for k in ref.DEFAULT_AXES if k in ini}
    cfg = ref.Cfg(dims, axes)
    if cfg.norm != "sum" or cfg.alpha != 1.0:
        raise UsageError(f"attn-norm {cfg.norm} / attn-alpha {cfg.alpha}: the probe of such runs measures proxy "
                         "scores, which this twin does not reproduce")
    return cfg


def decays(name: str) -> bool:
    """sinklab's weight-decay set (param_layout, kind == matrix)."""
    no_decay = ("layernorm.weight", "model.norm.weight", "model.sink_token", "relative_attention_bias.weight",
                "self_attn.k_bias", "self_attn.v_bias", "self_attn.sinks")
    return not any(name.endswith(s) or name == s for s in no_decay)


def learning_rate(ini: dict[str, str], steps: int, step: int) -> float:
    lr, min_lr = float(ini["lr"]), float(ini.get("min-lr", "0"))
    warmup, kind = int(ini.get("warmup-steps", "0")), ini.get("lr-schedule", "constant")
    if step < warmup:
        return lr * (step + 1) / warmup
    if kind == "constant":
        return lr
    span = steps - warmup
    p = (step - warmup + 1) / span if span > 0 else 1.0
    p = min(max(p, 0.0), 1.0)
    if p == 1.0:
        return min_lr
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * p))


# ------------------------------------------------------------------------------------------------
# Data (src/io/shard.hpp, src/train/data.hpp)

_HEADER = struct.Struct("<8sIIIIQQIII12s")


def open_shard(path: str):
    with open(path, "rb") as f:
        magic, _v, hbytes, vocab, tbytes, n_tok, _docs, eos, bos, _crc, _r = _HEADER.unpack(f.read(64))
    if magic != b"SLTOKENS":
        raise UsageError(f"{path}: not a sinklab shard")
    dtype = np.dtype("<u2" if tbytes == 2 else "<u4")
    return np.memmap(path, dtype=dtype, mode="r", offset=hbytes, shape=(n_tok,)), eos, bos, vocab


class Rows:
    """Chunk c of a list of shards as sinklab's ChunkSampler cuts it (read_chunk: no interventions)."""

    def __init__(self, shards: list[str], C: int, document_rows: bool, max_tokens: int = 0):
        opened = [open_shard(p) for p in shards]
        self.stream = np.concatenate([np.asarray(t) for t, *_ in opened]) if len(opened) > 1 else opened[0][0]
        self.eos, self.bos = opened[0][1], opened[0][2]
        n = len(self.stream) if max_tokens <= 0 else min(max_tokens, len(self.stream))
        self.C, self.n_tokens = C, n
        if document_rows:
            ends = np.flatnonzero(np.asarray(self.stream[:n]) == self.eos) + 1
            self.starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
            if np.any(ends - self.starts < C + 1):
                raise UsageError(f"--document-rows: a document of {shards} is shorter than context + 1")
        else:
            self.starts = np.arange((n - 1) // C, dtype=np.int64) * C

    def __len__(self):
        return len(self.starts)

    def read(self, chunks) -> np.ndarray:
        idx = self.starts[np.asarray(chunks, dtype=np.int64)][:, None] + np.arange(self.C + 1)[None, :]
        return np.asarray(self.stream[idx], dtype=np.int64)


def intervene(ini: dict[str, str], rows: np.ndarray) -> np.ndarray:
    if ini.get("resample-positions", ""):
        raise UsageError("--resample-positions: the twin does not replicate sinklab's Philox draws")
    p = int(ini.get("fixed-token-position", "0"))
    if p > 0:
        rows = rows.copy()
        rows[:, p - 1] = int(ini.get("fixed-token-id", "0"))
    return rows


# ------------------------------------------------------------------------------------------------
# The model


def use_dtype(dtype: torch.dtype) -> None:
    """The reference module computes in its global `f64`; float32 replaces it. RoPE's tables are formed
    in float64 and rounded once to the activations' dtype (sinklab's rope op does the same)."""
    ref.f64 = dtype
    if dtype == torch.float64:
        ref.rope = ref_rope_f64
        return

    def rope_tables_f64(x, theta):
        T, dh = x.shape[1], x.shape[-1]
        half = dh // 2
        inv_freq = 1.0 / theta ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
        cos = ang.cos().to(x.dtype)[None, :, None, :]
        sin = ang.sin().to(x.dtype)[None, :, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    ref.rope = rope_tables_f64


def load_weights(ckpt: Path, cfg, dtype) -> dict[str, torch.Tensor]:
    from safetensors.numpy import load_file
    weights = load_file(str(ckpt / "model.safetensors"))
    names = [n for n, _ in cfg.param_shapes()]
    if set(weights) != set(names):
        raise UsageError(f"{ckpt}: parameters {sorted(set(weights) ^ set(names))} differ from the reference's")
    params = {}
    for name, shape in cfg.param_shapes():
        w = weights[name]
        if tuple(w.shape) != tuple(shape):
            raise UsageError(f"{ckpt}: {name} has shape {w.shape}, the reference {shape}")
        params[name] = torch.from_numpy(w.astype(np.float32)).to(dtype).requires_grad_(True)
    return params


def token_losses(cfg, params, ids: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    logits = ref.forward(cfg, params, ids, None, return_logits=True)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.V), tgt.reshape(-1), reduction="none").view(tgt.shape)


# ------------------------------------------------------------------------------------------------
# Evaluation (src/train/evaluation.cpp, src/probe/model_probe.hpp)


class Evaluator:
    def __init__(self, ini, cfg, micro_rows: int):
        self.ini, self.cfg, self.rows = ini, cfg, micro_rows
        C = cfg.C
        self.valid = Rows([data_path(p) for p in ini["valid-data"].split(",")], C, as_bool(ini.get("document-rows", "false")))
        self.eval_rows = int(ini.get("eval-rows", "16"))
        self.probe_n, self.probe_T = int(ini.get("probe-sequences", "100")), int(ini.get("probe-length", "64"))
        self.bbm = None
        if ini.get("bbm-meta", ""):
            meta = json.load(open(data_path(ini["bbm-meta"])))
            self.bbm = dict(triggers=set(meta["triggers"]["ids"]), bos=meta["vocab"]["bos_id"],
                            delim=meta["vocab"]["delimiter_id"])
        self.intervened = int(ini.get("fixed-token-position", "0")) > 0 or bool(ini.get("resample-positions", ""))

    @torch.no_grad()
    def run(self, params) -> dict:
        cfg, out = self.cfg, {}
        d = {n: p.detach() for n, p in params.items()}
        rows = self.valid.read(range(self.eval_rows))
        ids, tgt = torch.from_numpy(rows[:, :-1]), torch.from_numpy(rows[:, 1:])
        losses = torch.cat([token_losses(cfg, d, ids[i:i + self.rows], tgt[i:i + self.rows])
                            for i in range(0, len(ids), self.rows)]).double()
        out["valid_loss"] = float(losses.mean())
        if self.bbm:
            b = self.bbm
            inp, tg = ids.numpy(), tgt.numpy()
            ok = ~(np.isin(inp, [b["bos"], b["delim"]]) | (tg == b["delim"]))
            ok[:, 0] = False  # position 0 (BOS predicts x_1) counts as neither
            trig = np.isin(inp, list(b["triggers"]))
            lo = losses.numpy()
            out["copy_loss"] = float(lo[ok & trig].mean())
            out["bigram_loss"] = float(lo[ok & ~trig].mean())
        probe_rows = self.valid.read(range(self.probe_n))
        out.update(self.probe(d, probe_rows))
        if self.intervened:
            rows_i = intervene(self.ini, probe_rows)  # fixed tokens only (resampling is refused)
            out["alpha_intervened"] = self.probe(d, rows_i)["alpha"]
        return out

    def probe(self, d, rows: np.ndarray) -> dict:
        cfg, T = self.cfg, self.probe_T
        ids = torch.from_numpy(rows[:, :T])
        G = 2 if self.bbm else 1
        groups = np.zeros(ids.shape, dtype=np.int64)
        if self.bbm:
            groups = np.isin(ids.numpy(), list(self.bbm["triggers"])).astype(np.int64)
        alpha_sum = np.zeros((cfg.L, cfg.H))
        first_sum = np.zeros((cfg.L, cfg.H, G))
        counts = np.bincount(groups.ravel(), minlength=G).astype(np.float64)
        text0 = cfg.lead_pos  # text positions after a sink token's; keys after the lead keys
        key0 = cfg.lead_keys + cfg.lead_pos
        for i in range(0, len(ids), self.rows):
            probs = []
            ref.forward(cfg, d, ids[i:i + self.rows], None, probs_out=probs, return_logits=True, all_layers=True)
            g = torch.from_numpy(groups[i:i + self.rows])
            for l, P in enumerate(probs):
                a0 = P[:, :, text0:, key0].double()  # [b, H, T]: A[i, 0]
                alpha_sum[l] += a0.mean(-1).sum(0).numpy()
                for k in range(G):
                    first_sum[l, :, k] += (a0 * (g == k)[:, None, :]).sum((0, 2)).numpy()
        with np.errstate(invalid="ignore"):
            first = first_sum / counts[None, None, :]
        return {"alpha": alpha_sum / len(ids), "first_attention": first}


def sinklab_evals(h5, run: str) -> dict:
    g = h5[f"/runs/{run}/eval"]
    out = {"step": g["step"][:].astype(int), "valid_loss": g["valid_loss"][:], "alpha": g["alpha"][:],
           "first_attention": g["first_attention"][:]}
    for k in ("copy_loss", "bigram_loss"):
        if k in g:
            out[k] = g[k][:]
    if "alpha_k_intervened" in g:
        out["alpha_intervened"] = g["alpha_k_intervened"][:][..., 0]
    return out


# ------------------------------------------------------------------------------------------------
# The replay


def replay(run_dir: Path, run: str | None, dtype: torch.dtype, log_every: int = 20) -> dict:
    h5 = h5py.File(run_dir / "results.h5", "r")
    runs = list(h5["runs"].keys())
    if run is None:
        if len(runs) != 1:
            raise UsageError(f"{run_dir}/results.h5 holds runs {runs}: name one with --run")
        run = runs[0]
    grp = h5[f"/runs/{run}"]
    ini = parse_ini(grp.attrs["config"] if isinstance(grp.attrs["config"], str) else grp.attrs["config"].decode())
    if "batches" not in grp:
        raise UsageError(f"{run_dir}: run {run} has no /batches/rows (run sinklab-pretrain with --record-batches)")
    batches = grp["batches/rows"][:]
    ckpt = run_dir / "checkpoints" / "step_00000000"
    if not (ckpt / "model.safetensors").exists():
        raise UsageError(f"{ckpt}: no step-0 checkpoint (--checkpoint-at-start; keep it with --keep-checkpoints)")
    cfg = ref_config(ini)
    use_dtype(dtype)
    params = load_weights(ckpt, cfg, dtype)
    names = [n for n, _ in cfg.param_shapes()]
    groups = [{"params": [params[n] for n in names if decays(n)], "weight_decay": float(ini.get("weight-decay", "0.1"))},
              {"params": [params[n] for n in names if not decays(n)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=float(ini["lr"]), betas=(float(ini.get("beta1", "0.9")), float(ini.get("beta2", "0.95"))),
                            eps=float(ini.get("adam-eps", "1e-8")), foreach=False)
    clip = float(ini.get("grad-clip", "1.0"))
    steps = int(ini["steps"])
    if len(batches) < steps:
        raise UsageError(f"{run_dir}: {len(batches)} recorded steps, the run has {steps}")
    train = Rows([data_path(p) for p in ini["train-data"].split(",")], cfg.C, as_bool(ini.get("document-rows", "false")),
                 int(ini.get("max-train-tokens", "0")))
    micro = int(ini["micro-batch-rows"])
    evaluator = Evaluator(ini, cfg, micro)
    theirs = sinklab_evals(h5, run)
    their_train = {k: grp[f"train/{k}"][:] for k in ("loss", "grad_norm", "lr")}
    eval_steps = set(int(s) for s in theirs["step"])

    mine = {"train": {"loss": [], "grad_norm": [], "lr": []}, "eval": []}
    t0 = time.time()

    def evaluate(n_done):
        e = evaluator.run(params)
        e["step"] = n_done
        mine["eval"].append(e)

    if 0 in eval_steps:
        evaluate(0)
    for step in range(steps):
        rows = intervene(ini, train.read(batches[step]))
        ids, tgt = torch.from_numpy(rows[:, :-1]), torch.from_numpy(rows[:, 1:])
        count = tgt.numel()  # pre-training counts every target
        for p in params.values():
            p.grad = None
        total = 0.0
        for i in range(0, len(ids), micro):
            loss_sum, _ = ref.forward(cfg, params, ids[i:i + micro], tgt[i:i + micro])
            (loss_sum / count).backward()
            total += float(loss_sum.detach())
        grads = [params[n].grad for n in names]
        norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
        if clip > 0 and norm > clip:
            coef = clip / (norm + 1e-6)
            for g in grads:
                g.mul_(coef)
        lr = learning_rate(ini, steps, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        mine["train"]["loss"].append(total / count)
        mine["train"]["grad_norm"].append(norm)
        mine["train"]["lr"].append(lr)
        n_done = step + 1
        if n_done in eval_steps:
            evaluate(n_done)
        if n_done % log_every == 0 or n_done == steps:
            print(f"twin step {n_done}/{steps} | loss {total / count:.4f} (sinklab {their_train['loss'][step]:.4f}) | "
                  f"grad norm {norm:.3f} ({their_train['grad_norm'][step]:.3f}) | {time.time() - t0:.0f} s", flush=True)
    # The final weights beside sinklab's last checkpoint: ||w_twin - w_sinklab|| / ||w_sinklab|| per tensor.
    weights_rel = {}
    last = run_dir / "checkpoints" / f"step_{steps:08d}" / "model.safetensors"
    if last.exists():
        from safetensors.numpy import load_file
        theirs_w = load_file(str(last))
        for n in names:
            a, b = params[n].detach().double().numpy(), theirs_w[n].astype(np.float64)
            weights_rel[n] = float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
    return dict(run=run, ini=ini, cfg=cfg, mine=mine, theirs=theirs, their_train=their_train,
                weights_rel=weights_rel, seconds=time.time() - t0)


# ------------------------------------------------------------------------------------------------
# The comparison


def compare(res: dict, max_loss_rel: float, max_attn_abs: float) -> tuple[dict, list[str]]:
    mine, theirs, tt = res["mine"], res["theirs"], res["their_train"]
    tl, ml = np.asarray(tt["loss"]), np.asarray(mine["train"]["loss"])
    n = len(ml)
    train_rel = np.abs(ml - tl[:n]) / np.abs(tl[:n])
    gn_rel = np.abs(np.asarray(mine["train"]["grad_norm"]) - tt["grad_norm"][:n]) / np.abs(tt["grad_norm"][:n])
    lr_diff = np.abs(np.asarray(mine["train"]["lr"]) - tt["lr"][:n])
    rows = []
    bbm = "copy_loss" in theirs
    for e in mine["eval"]:
        i = int(np.flatnonzero(theirs["step"] == e["step"])[0])
        r = {"step": e["step"], "valid_loss_sinklab": float(theirs["valid_loss"][i]), "valid_loss_twin": e["valid_loss"]}
        r["valid_loss_rel"] = abs(r["valid_loss_twin"] - r["valid_loss_sinklab"]) / abs(r["valid_loss_sinklab"])
        r["train_loss_sinklab"] = float(tl[e["step"] - 1]) if e["step"] > 0 else float("nan")
        r["train_loss_twin"] = float(ml[e["step"] - 1]) if e["step"] > 0 else float("nan")
        a_s, a_t = np.asarray(theirs["alpha"][i], dtype=np.float64), e["alpha"]
        r["alpha1_sinklab"], r["alpha1_twin"] = a_s.tolist(), a_t.tolist()
        r["alpha1_abs"] = float(np.max(np.abs(a_s - a_t)))
        f_s, f_t = np.asarray(theirs["first_attention"][i], dtype=np.float64), e["first_attention"]
        r["first_sinklab"], r["first_twin"] = f_s.tolist(), f_t.tolist()
        r["bos_attn_abs"] = float(np.nanmax(np.abs(f_s[..., 0] - f_t[..., 0])))  # group 0: Guo's BOS attention
        if "alpha_intervened" in theirs and "alpha_intervened" in e:
            ai_s, ai_t = np.asarray(theirs["alpha_intervened"][i], dtype=np.float64), e["alpha_intervened"]
            r["alpha1_intervened_sinklab"], r["alpha1_intervened_twin"] = ai_s.tolist(), ai_t.tolist()
            r["alpha1_intervened_abs"] = float(np.max(np.abs(ai_s - ai_t)))
        if bbm:
            for k in ("copy_loss", "bigram_loss"):
                r[f"{k}_sinklab"], r[f"{k}_twin"] = float(theirs[k][i]), e[k]
        rows.append(r)

    def worst(key):
        best = max(rows, key=lambda r: r.get(key, -1.0))
        return best.get(key, float("nan")), best["step"]

    summary = {
        "train_loss_rel_max": float(train_rel.max()), "train_loss_rel_max_step": int(train_rel.argmax()) + 1,
        "grad_norm_rel_max": float(gn_rel.max()), "grad_norm_rel_max_step": int(gn_rel.argmax()) + 1,
        "lr_abs_max": float(lr_diff.max()),
    }
    for key in ("valid_loss_rel", "alpha1_abs", "bos_attn_abs", "alpha1_intervened_abs"):
        if any(key in r for r in rows):
            summary[f"{key}_max"], summary[f"{key}_max_step"] = worst(key)
    failures = []
    if summary["lr_abs_max"] > 1e-12 * float(res["ini"]["lr"]) + 1e-15:
        failures.append(f"learning rates differ by {summary['lr_abs_max']:.3g} (schedule)")
    for key, bound in (("train_loss_rel_max", max_loss_rel), ("valid_loss_rel_max", max_loss_rel),
                       ("alpha1_abs_max", max_attn_abs), ("bos_attn_abs_max", max_attn_abs),
                       ("alpha1_intervened_abs_max", max_attn_abs)):
        if key in summary and not summary[key] <= bound:
            failures.append(f"{key} = {summary[key]:.4g} > {bound} (step {summary.get(key + '_step', summary.get(key.replace('_max', '_max_step')))})")
    return {"summary": summary, "evals": rows, "train_loss_rel": train_rel.tolist(),
            "grad_norm_rel": gn_rel.tolist()}, failures


def print_table(cmp: dict, bbm: bool, intervened: bool) -> None:
    head = f"{'step':>5} {'train_sl':>9} {'train_tw':>9} {'valid_sl':>9} {'valid_tw':>9} {'rel':>8} " \
           f"{'alpha1_sl':>9} {'alpha1_tw':>9} {'|d|':>7} {'first_sl':>8} {'first_tw':>8} {'|d|':>7}"
    if intervened:
        head += f" {'a1int_sl':>8} {'a1int_tw':>8} {'|d|':>7}"
    if bbm:
        head += f" {'copy_sl':>8} {'copy_tw':>8} {'bigr_sl':>8} {'bigr_tw':>8}"
    print(head)
    for r in cmp["evals"]:
        # alpha1 / first attention: the head with the largest difference (the mean over heads where H > 1
        # would hide it); printed as the layer-0 head-0 values when all agree
        a_s, a_t = np.asarray(r["alpha1_sinklab"]), np.asarray(r["alpha1_twin"])
        j = np.unravel_index(np.argmax(np.abs(a_s - a_t)), a_s.shape)
        f_s, f_t = np.asarray(r["first_sinklab"])[..., 0], np.asarray(r["first_twin"])[..., 0]
        k = np.unravel_index(np.nanargmax(np.abs(f_s - f_t)), f_s.shape)
        line = f"{r['step']:>5} {r['train_loss_sinklab']:>9.4f} {r['train_loss_twin']:>9.4f} " \
               f"{r['valid_loss_sinklab']:>9.4f} {r['valid_loss_twin']:>9.4f} {r['valid_loss_rel']:>8.1e} " \
               f"{a_s[j]:>9.4f} {a_t[j]:>9.4f} {r['alpha1_abs']:>7.1e} {f_s[k]:>8.4f} {f_t[k]:>8.4f} {r['bos_attn_abs']:>7.1e}"
        if intervened and "alpha1_intervened_abs" in r:
            ai_s, ai_t = np.asarray(r["alpha1_intervened_sinklab"]), np.asarray(r["alpha1_intervened_twin"])
            m = np.unravel_index(np.argmax(np.abs(ai_s - ai_t)), ai_s.shape)
            line += f" {ai_s[m]:>8.4f} {ai_t[m]:>8.4f} {r['alpha1_intervened_abs']:>7.1e}"
        if bbm:
            line += f" {r['copy_loss_sinklab']:>8.4f} {r['copy_loss_twin']:>8.4f} {r['bigram_loss_sinklab']:>8.4f} " \
                    f"{r['bigram_loss_twin']:>8.4f}"
        print(line)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path, help="sinklab-pretrain's --out-dir (results.h5, checkpoints/step_00000000)")
    p.add_argument("--run", help="the run's name in results.h5 (default: its only run)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    p.add_argument("--json", type=Path, help="write the curves and the comparison here")
    p.add_argument("--max-loss-rel", type=float, default=0.01, help="bound on the train/valid loss relative difference")
    p.add_argument("--max-attn-abs", type=float, default=0.02, help="bound on alpha_1 / first-token attention differences")
    p.add_argument("--log-every", type=int, default=20)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    try:
        res = replay(a.run_dir, a.run, torch.float32 if a.dtype == "float32" else torch.float64, a.log_every)
    except UsageError as e:
        print(f"replay: {e}", file=sys.stderr)
        return 2
    cmp, failures = compare(res, a.max_loss_rel, a.max_attn_abs)
    bbm = "copy_loss" in res["theirs"]
    intervened = "alpha_intervened" in res["theirs"]
    print(f"\n== sinklab run {a.run_dir} ({res['run']}) vs its PyTorch twin ({a.dtype}, torch {torch.__version__}, "
          f"{a.threads} threads, {res['seconds']:.0f} s)")
    print("evaluations (alpha1 / first: the layer-head pair with the largest difference; first = attention to the "
          "first token of group 0" + (" = non-trigger queries incl. BOS: Guo's BOS attention" if bbm else "") + ")")
    print_table(cmp, bbm, intervened)
    s = cmp["summary"]
    print(f"\nlargest differences: train loss {s['train_loss_rel_max']:.2e} rel (step {s['train_loss_rel_max_step']}), "
          f"valid loss {s['valid_loss_rel_max']:.2e} rel (step {s['valid_loss_rel_max_step']}), "
          f"grad norm {s['grad_norm_rel_max']:.2e} rel (step {s['grad_norm_rel_max_step']}), "
          f"alpha_1 {s['alpha1_abs_max']:.2e} abs (step {s['alpha1_abs_max_step']}), "
          f"first-token attention {s['bos_attn_abs_max']:.2e} abs (step {s['bos_attn_abs_max_step']})"
          + (f", alpha_1 intervened {s['alpha1_intervened_abs_max']:.2e} abs (step {s['alpha1_intervened_abs_max_step']})"
             if "alpha1_intervened_abs_max" in s else "") + f"; lr {s['lr_abs_max']:.1e} abs")
    if res["weights_rel"]:
        w = res["weights_rel"]
        top = max(w, key=w.get)
        print(f"final weights vs sinklab's step-{len(res['mine']['train']['loss'])} checkpoint: ||w_twin - w_sinklab|| / "
              f"||w_sinklab|| largest {w[top]:.2e} ({top}), median {float(np.median(list(w.values()))):.2e}")
    if a.json:
        mine = res["mine"]
        out = {"run_dir": str(a.run_dir), "run": res["run"], "dtype": a.dtype, "torch": torch.__version__,
               "threads": a.threads, "seconds": res["seconds"], "config": res["ini"],
               "bounds": {"loss_rel": a.max_loss_rel, "attn_abs": a.max_attn_abs}, "pass": not failures,
               "failures": failures, "final_weights_rel": res["weights_rel"], **cmp,
               "train": {"sinklab": {k: v.tolist() for k, v in res["their_train"].items()}, "twin": mine["train"]}}
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(out, indent=1, default=float))
        print(f"wrote {a.json}")
    if failures:
        print("FAIL: " + "; ".join(failures))
        return 1
    print(f"PASS: every loss within {a.max_loss_rel:g} relative, every alpha_1 / first-token attention within "
          f"{a.max_attn_abs:g} absolute")
    return 0


if __name__ == "__main__":
    sys.exit(main())
