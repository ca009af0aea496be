"""sinklab-survey's numbers for SmolLM2-135M against an independent reference on exactly the same tokens.

    .venv-oracle/bin/python bench/check_smollm2_survey.py results/demo/survey.h5 [--model smollm2-135m]

(bench/check_smollm2_survey.sh installs the oracle environment first.) For every item the survey wrote
under /models/<model>/<input>/<domain> it reads the token ids it measured (`tokens` [n,T]) and runs them
through the reference: transformers' own GGUF loader (AutoModelForCausalLM.from_pretrained(dir,
gguf_file=...): gguf's dequantiser, transformers' q/k reordering and config mapping) with eager attention,
in float32, on the original .gguf file (its sha256 must be the survey's `source_sha256`). From the
reference's logits and attention probabilities it computes, as DESIGN.md defines them:

* loss: mean next-token cross-entropy over the n (T-1) predicted positions (float64 from the logits);
* alpha[L,H,K]: alpha_k = 1/(T-k+1) sum_{i>=k} A[i,k], mean over the sequences;
* Sink_k^eps: 100 * mean over sequences, layers and heads of [alpha_k > eps] (per-sample thresholds).

and compares them with the survey's `loss` attribute and `alpha`, `sink_k` datasets:

* loss: |survey - reference| <= LOSS_TOL (absolute, nats);
* alpha: max |survey - reference| <= ALPHA_TOL (absolute; alpha is a probability);
* Sink_k^eps: equal, except where a sequence's reference alpha_k lies within NEAR of eps, where float32
  rounding may put the two sides on different sides of the threshold; each such (sequence, layer, head)
  may move Sink by 100 / (n L H) percentage points.

The tolerances: both sides compute in float32 from bit-identical float32 weights (tests/python/oracle/
check_smollm2.py shows transformers' dequantisation equals data_prep gguf-import's), so they differ only in
the order of float32 sums (OpenBLAS vs torch's GEMMs, softmax, RMSNorm) through 30 layers. check_smollm2.py
bounds the logits' difference by 1e-4 (measured ~1e-5); the loss moves at most by twice that and alpha (a
softmax column mean) by far less. LOSS_TOL = ALPHA_TOL = 1e-4 leaves a margin; the measured differences
are printed, and ~1e-5 relative is what to expect.

Prints one line per item and a pooled line per input (natural: all domains, as Table 1), then PASS/FAIL;
exit status 1 on FAIL. --dump OUT.npz keeps the reference's numbers.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loader draws a progress bar

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_GGUF = REPO_ROOT / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
LOSS_TOL = 1e-4
ALPHA_TOL = 1e-4
NEAR = 1e-4


def alpha_of(attn: torch.Tensor, K: int) -> torch.Tensor:
    """attn [B,H,T,T] -> alpha [B,H,K] (float64): alpha[p] = 1/(T-p) sum_{i=p}^{T-1} A[i,p]."""
    T = attn.shape[-1]
    cols = attn.double().tril().sum(dim=-2)  # column sums on and below the diagonal
    return (cols / torch.arange(T, 0, -1, dtype=torch.float64))[..., :K]


@torch.no_grad()
def reference(model, tokens: np.ndarray, K: int, batch: int) -> tuple[float, np.ndarray]:
    """Mean next-token loss and alpha [n,L,H,K] of every sequence."""
    loss_sum, alphas = 0.0, []
    for s in range(0, len(tokens), batch):
        ids = torch.from_numpy(tokens[s:s + batch].astype(np.int64))
        out = model(input_ids=ids, output_attentions=True)
        logits = out.logits[:, :-1].double()
        loss_sum += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                    reduction="sum").item()
        alphas.append(torch.stack([alpha_of(a, K) for a in out.attentions], dim=1).numpy())  # [B,L,H,K]
    return loss_sum / (tokens.shape[0] * (tokens.shape[1] - 1)), np.concatenate(alphas)


def sinks(alpha: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """alpha [n,L,H,K] -> Sink_k^eps [K,E] in percent (per-sample thresholds)."""
    return np.stack([[100.0 * (alpha[..., k] > e).mean() for e in eps] for k in range(alpha.shape[-1])])


def near_allowance(alpha: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """[K,E]: how far Sink_k^eps may move from samples whose alpha_k is within NEAR of eps (percent)."""
    n_samples = np.prod(alpha.shape[:-1])
    return np.stack([[100.0 * (np.abs(alpha[..., k] - e) < NEAR).sum() / n_samples for e in eps]
                     for k in range(alpha.shape[-1])])


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("survey", type=Path, help="sinklab-survey results file")
    ap.add_argument("--model", default="smollm2-135m", help="model name in the file (/models/<model>)")
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF, help="the .gguf file the survey's model was imported from")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dump", type=Path, help="write the reference's loss, alpha, Sink per item (.npz)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)

    import importlib.metadata

    import transformers
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()
    items = []
    with h5py.File(a.survey, "r") as f:
        if f"models/{a.model}" not in f:
            sys.exit(f"{a.survey}: no /models/{a.model}")
        for inp, g_in in f[f"models/{a.model}"].items():
            for dom, g in g_in.items():
                missing = [k for k in ("tokens", "alpha", "sink_k", "sink_eps") if k not in g] + \
                          [k for k in ("loss",) if k not in g.attrs]
                if missing:
                    sys.exit(f"{a.survey}: {g.name} lacks {', '.join(missing)} (made before the survey stored them?)")
                items.append({"input": inp, "domain": dom, "tokens": g["tokens"][:], "alpha": g["alpha"][:],
                              "sink_k": g["sink_k"][:], "eps": g["sink_eps"][:], "loss": float(g.attrs["loss"]),
                              "sha": g.attrs.get("source_sha256", ""),
                              "quantization": g.attrs.get("quantization", "")})
    if not items:
        sys.exit(f"{a.survey}: no items under /models/{a.model}")
    sha = sha256(a.gguf)
    shas = {it["sha"] for it in items}
    if shas != {sha}:
        sys.exit(f"{a.gguf}: sha256 {sha[:12]} is not the survey's source_sha256 {shas}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, gguf "
          f"{importlib.metadata.version('gguf')}, {a.threads} threads; reference: {a.gguf.name} "
          f"({items[0]['quantization']}) through transformers' GGUF loader, eager attention, float32")
    model = AutoModelForCausalLM.from_pretrained(str(a.gguf.parent), gguf_file=a.gguf.name, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    eps = items[0]["eps"]
    i03 = int(np.argmin(np.abs(eps - 0.3)))
    print(f"{'input':<9}{'domain':<19}{'n':>4}{'loss survey':>12}{'loss ref':>11}{'|dloss|':>10}"
          f"{'alpha_1':>9}{'max|dalpha|':>12}{'Sink^' + format(eps[i03], 'g') + ' s/r':>18}{'|dSink|':>9}{'allowed':>9}")
    worst = {"loss": 0.0, "alpha": 0.0, "sink_excess": 0.0}
    dump, pooled = {}, {}
    t0 = time.time()
    for it in items:
        tokens = it["tokens"]
        K = it["alpha"].shape[-1]
        loss_r, alpha_n = reference(model, tokens, K, a.batch)
        alpha_r = alpha_n.mean(axis=0)
        sink_r = sinks(alpha_n, eps)
        allowed = near_allowance(alpha_n, eps)
        dloss = abs(it["loss"] - loss_r)
        dalpha = float(np.abs(it["alpha"] - alpha_r).max())
        dsink = np.abs(it["sink_k"] - sink_r)
        excess = float((dsink - allowed - 1e-9).max())
        worst["loss"] = max(worst["loss"], dloss)
        worst["alpha"] = max(worst["alpha"], dalpha)
        worst["sink_excess"] = max(worst["sink_excess"], excess)
        print(f"{it['input']:<9}{it['domain']:<19}{len(tokens):>4}{it['loss']:>12.5f}{loss_r:>11.5f}{dloss:>10.2g}"
              f"{alpha_r[..., 0].mean():>9.4f}{dalpha:>12.2g}"
              f"{it['sink_k'][0, i03]:>9.2f}/{sink_r[0, i03]:<8.2f}{dsink.max():>9.3g}{allowed.max():>9.3g}", flush=True)
        key = f"{it['input']}/{it['domain']}"
        dump.update({f"{key}/loss": np.asarray(loss_r), f"{key}/alpha": alpha_r, f"{key}/sink_k": sink_r,
                     f"{key}/tokens": tokens})
        p = pooled.setdefault(it["input"], {"n": 0, "loss_s": 0.0, "loss_r": 0.0, "sink_s": 0.0, "alpha": []})
        p["n"] += len(tokens)
        p["loss_s"] += it["loss"] * len(tokens)
        p["loss_r"] += loss_r * len(tokens)
        p["sink_s"] += it["sink_k"][0, i03] * len(tokens)
        p["alpha"].append(alpha_n)
    print(f"pooled over domains (sequence-weighted; {time.time() - t0:.0f} s of reference forwards):")
    for inp, p in pooled.items():
        alpha_n = np.concatenate(p["alpha"])
        print(f"  {inp:<8} n={p['n']:<4} loss survey {p['loss_s'] / p['n']:.5f} reference {p['loss_r'] / p['n']:.5f}"
              f"  Sink_1^{eps[i03]:g} survey {p['sink_s'] / p['n']:.2f} % reference {sinks(alpha_n, eps)[0, i03]:.2f} %"
              f"  mean alpha_1 reference {alpha_n[..., 0].mean():.4f}")
    if a.dump:
        np.savez_compressed(a.dump, eps=eps, **dump)
        print(f"wrote {a.dump}")
    ok = worst["loss"] <= LOSS_TOL and worst["alpha"] <= ALPHA_TOL and worst["sink_excess"] <= 0
    print(f"{'PASS' if ok else 'FAIL'}: {len(items)} items; max |dloss| {worst['loss']:.3g} (tolerance {LOSS_TOL:g}), "
          f"max |dalpha| {worst['alpha']:.3g} (tolerance {ALPHA_TOL:g}), Sink_k^eps differences beyond the "
          f"near-threshold allowance: {max(worst['sink_excess'], 0):.3g} points (tolerance 0)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
