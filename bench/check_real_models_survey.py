"""sinklab-survey's numbers for the real models (GGUF imports) against an independent reference on exactly the
same tokens.

    .venv-oracle/bin/python bench/check_real_models_survey.py results/survey/real_models.h5 \
        [--model NAME=FILE.gguf ...] [--items natural,random,repeat] [--seq-len T]

(bench/check_real_models_survey.sh installs the oracle environment first; bench/check_smollm2_survey.sh is
the demo's SmolLM2 case.) Models: every --model NAME=GGUF, by default the three of env/fetch_models.sh
(smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b) that the file holds. For every item the survey wrote under
/models/<model>/<input>/<domain> it reads the token ids it measured (`tokens` [n,T]) and runs them through
the reference: transformers' own GGUF loader (AutoModelForCausalLM.from_pretrained(dir, gguf_file=...):
gguf's dequantiser, transformers' config mapping, q/k reordering for Llama, norm - 1 for Gemma) with
eager attention, in float32, on the original .gguf file (its sha256 must be the survey's `source_sha256`).
From the reference's logits and attention probabilities it computes, as DESIGN.md defines them:

* loss: mean next-token cross-entropy over the n (T-1) predicted positions (float64 from the logits);
* alpha[L,H,K]: alpha_k = 1/(T-k+1) sum_{i>=k} A[i,k], mean over the sequences;
* Sink_k^eps: 100 * mean over sequences, layers and heads of [alpha_k > eps] (per-sample thresholds).

and compares them with the survey's `loss` attribute and `alpha`, `sink_k` datasets:

* loss: |survey - reference| <= LOSS_RTOL * reference (relative);
* alpha: max |survey - reference| <= ALPHA_TOL (absolute; alpha is a probability);
* Sink_k^eps: equal, except where a sequence's reference alpha_k lies within NEAR of eps, where float32
  rounding may put the two sides on different sides of the threshold; each such (sequence, layer, head)
  may move Sink by 100 / (n L H) percentage points. How many items needed that allowance is printed.

The tolerances: both sides compute in float32 from the same float32 weights (gguf's dequantiser on both
sides; data_prep gguf-import writes them to safetensors unchanged, Gemma's norms as transformers' loader
stores them), so they differ only in the order of float32 sums (OpenBLAS vs torch's GEMMs, softmax,
RMSNorm) through 18-30 layers. The issue's acceptance is alpha within 1e-5, Sink equal, loss within 1e-5
relative; the measured differences are printed.

Prints one line per item and a pooled line per model and input (natural: all domains, as Table 1), then
PASS/FAIL; exit status 1 on FAIL. --dump OUT.npz keeps the reference's numbers.
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
MODELS = {
    "smollm2-135m": REPO_ROOT / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3-270m": REPO_ROOT / "data" / "models" / "gemma-3-270m-q4_k_m.gguf",
    "qwen2.5-coder-0.5b": REPO_ROOT / "data" / "models" / "Qwen2.5-Coder-0.5B-Instruct-AWQ.Q4_K_M.gguf",
}
LOSS_RTOL = 1e-5
ALPHA_TOL = 1e-5
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


def read_items(path: Path, model: str, inputs: set | None, seq_len: int | None, max_items: int | None) -> list:
    """The items of /models/<model> (labels input[@T<T>][+ablation] / domain) with what the check needs;
    ablation items (no alpha, a loss under another attention) are left out."""
    items = []
    with h5py.File(path, "r") as f:
        for label, g_in in f[f"models/{model}"].items():
            if "+" in label or (inputs and label.split("@")[0] not in inputs):
                continue
            for dom, g in g_in.items():
                if seq_len and int(g.attrs["T"]) != seq_len:
                    continue
                missing = [k for k in ("tokens", "alpha", "sink_k", "sink_eps") if k not in g] + \
                          [k for k in ("loss",) if k not in g.attrs]
                if missing:
                    sys.exit(f"{path}: {g.name} lacks {', '.join(missing)} (made before the survey stored them?)")
                items.append({"input": label, "domain": dom, "tokens": g["tokens"][:], "alpha": g["alpha"][:],
                              "sink_k": g["sink_k"][:], "eps": g["sink_eps"][:], "loss": float(g.attrs["loss"]),
                              "sha": g.attrs.get("source_sha256", ""),
                              "quantization": g.attrs.get("quantization", "")})
    return items[:max_items] if max_items else items


def check_model(name: str, gguf: Path, items: list, a, dump: dict) -> dict:
    """Runs the reference on every item of one model; returns the worst differences."""
    from transformers import AutoModelForCausalLM

    sha = sha256(gguf)
    shas = {it["sha"] for it in items}
    if shas != {sha}:
        sys.exit(f"{gguf}: sha256 {sha[:12]} is not the survey's source_sha256 {shas} of {name}")
    print(f"== {name}: reference {gguf.name} ({items[0]['quantization']}) through transformers' GGUF loader, "
          f"eager attention, float32")
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    eps = items[0]["eps"]
    i03 = int(np.argmin(np.abs(eps - 0.3)))
    print(f"{'input':<13}{'domain':<19}{'n':>4}{'loss survey':>12}{'loss ref':>11}{'rel dloss':>10}"
          f"{'alpha_1':>9}{'max|dalpha|':>12}{'Sink^' + format(eps[i03], 'g') + ' s/r':>18}{'|dSink|':>9}{'allowed':>9}")
    worst = {"loss_rel": 0.0, "alpha": 0.0, "sink_excess": 0.0, "sink_diff": 0.0, "near_items": 0, "items": 0}
    pooled = {}
    t0 = time.time()
    for it in items:
        tokens = it["tokens"]
        K = it["alpha"].shape[-1]
        loss_r, alpha_n = reference(model, tokens, K, a.batch)
        alpha_r = alpha_n.mean(axis=0)
        sink_r = sinks(alpha_n, eps)
        allowed = near_allowance(alpha_n, eps)
        dloss = abs(it["loss"] - loss_r) / abs(loss_r)
        dalpha = float(np.abs(it["alpha"] - alpha_r).max())
        dsink = np.abs(it["sink_k"] - sink_r)
        excess = float((dsink - allowed - 1e-9).max())
        worst["loss_rel"] = max(worst["loss_rel"], dloss)
        worst["alpha"] = max(worst["alpha"], dalpha)
        worst["sink_excess"] = max(worst["sink_excess"], excess)
        worst["sink_diff"] = max(worst["sink_diff"], float(dsink.max()))
        worst["near_items"] += int(dsink.max() > 1e-9)
        worst["items"] += 1
        print(f"{it['input']:<13}{it['domain']:<19}{len(tokens):>4}{it['loss']:>12.5f}{loss_r:>11.5f}{dloss:>10.2g}"
              f"{alpha_r[..., 0].mean():>9.4f}{dalpha:>12.2g}"
              f"{it['sink_k'][0, i03]:>9.2f}/{sink_r[0, i03]:<8.2f}{dsink.max():>9.3g}{allowed.max():>9.3g}", flush=True)
        key = f"{name}/{it['input']}/{it['domain']}"
        dump.update({f"{key}/loss": np.asarray(loss_r), f"{key}/alpha": alpha_r, f"{key}/sink_k": sink_r,
                     f"{key}/tokens": tokens})
        p = pooled.setdefault(it["input"], {"n": 0, "loss_s": 0.0, "loss_r": 0.0, "sink_s": 0.0, "alpha": []})
        p["n"] += len(tokens)
        p["loss_s"] += it["loss"] * len(tokens)
        p["loss_r"] += loss_r * len(tokens)
        p["sink_s"] += it["sink_k"][0, i03] * len(tokens)
        p["alpha"].append(alpha_n)
    elapsed = time.time() - t0
    print(f"pooled over domains (sequence-weighted; {elapsed:.0f} s of reference forwards):")
    for inp, p in pooled.items():
        alpha_n = np.concatenate(p["alpha"])
        print(f"  {inp:<12} n={p['n']:<4} loss survey {p['loss_s'] / p['n']:.5f} reference {p['loss_r'] / p['n']:.5f}"
              f"  Sink_1^{eps[i03]:g} survey {p['sink_s'] / p['n']:.2f} % reference {sinks(alpha_n, eps)[0, i03]:.2f} %"
              f"  mean alpha_1 reference {alpha_n[..., 0].mean():.4f}")
    del model
    return worst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("survey", type=Path, help="sinklab-survey results file")
    ap.add_argument("--model", action="append", default=[], metavar="NAME=GGUF",
                    help="a model of the file (/models/<NAME>) and the .gguf it was imported from (repeatable; "
                         "default: those of env/fetch_models.sh the file holds)")
    ap.add_argument("--items", help="inputs to check (natural,random,repeat; default all but ablations)")
    ap.add_argument("--seq-len", type=int, help="check only the items of this T")
    ap.add_argument("--max-items", type=int, help="at most this many items per model (their file order)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dump", type=Path, help="write the reference's loss, alpha, Sink per item (.npz)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)

    import importlib.metadata

    import transformers

    transformers.utils.logging.disable_progress_bar()
    with h5py.File(a.survey, "r") as f:
        present = set(f["models"]) if "models" in f else set()
    models = {}
    for spec in a.model:
        name, _, path = spec.partition("=")
        if not path:
            sys.exit(f"--model {spec}: expected NAME=FILE.gguf")
        models[name] = Path(path)
    if not models:
        models = {n: p for n, p in MODELS.items() if n in present}
    for name in models:
        if name not in present:
            sys.exit(f"{a.survey}: no /models/{name}")
    if not models:
        sys.exit(f"{a.survey}: none of {', '.join(MODELS)} (name others with --model NAME=GGUF)")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, gguf "
          f"{importlib.metadata.version('gguf')}, {a.threads} threads")
    inputs = set(a.items.split(",")) if a.items else None
    results, dump = {}, {}
    for name, gguf in models.items():
        items = read_items(a.survey, name, inputs, a.seq_len, a.max_items)
        if not items:
            sys.exit(f"{a.survey}: no items of {name} to check")
        results[name] = check_model(name, gguf, items, a, dump)
    if a.dump:
        np.savez_compressed(a.dump, **dump)
        print(f"wrote {a.dump}")
    ok = True
    for name, w in results.items():
        good = w["loss_rel"] <= LOSS_RTOL and w["alpha"] <= ALPHA_TOL and w["sink_excess"] <= 0
        ok &= good
        print(f"{'PASS' if good else 'FAIL'} {name}: {w['items']} items; max relative |dloss| {w['loss_rel']:.3g} "
              f"(tolerance {LOSS_RTOL:g}), max |dalpha| {w['alpha']:.3g} (tolerance {ALPHA_TOL:g}), Sink_k^eps: "
              f"max |difference| {w['sink_diff']:.3g} points, in {w['near_items']} items, beyond the near-threshold "
              f"allowance {max(w['sink_excess'], 0):.3g} (tolerance 0)")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
