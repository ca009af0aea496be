"""Oracle check of the GGUF importer on the real SmolLM2-135M-Instruct file, and the independent reference
numbers that sinklab's own survey of that model is compared against. Manual / bench, not CI: needs torch,
transformers and gguf (.venv-oracle, env/requirements-oracle.txt; env/oracle.sh installs them).

    .venv-oracle/bin/python tests/python/oracle/check_smollm2.py            # the check, numbers to stdout
    .venv-oracle/bin/python tests/python/oracle/check_smollm2.py --tokens survey.h5 --dump-alpha ref.npz

Reference: transformers' own GGUF loader (AutoModelForCausalLM.from_pretrained(dir, gguf_file=...):
gguf's dequantiser, transformers' q/k reordering and config mapping), eager attention. (transformers 5.23
takes its dequantising path for 'llama' files; its warning about packed weights and float32 kernels under
--dtype float64 does not apply to them, and the weight check below would catch packed weights.) Under test: the
directory `python -m data_prep gguf-import` writes (our dequantiser, our reordering, our config.json),
loaded with LlamaForCausalLM.from_pretrained. Printed:

* weights: max |difference| per tensor (they should be equal: both are the same float32 dequantisation);
* per input set, both models: mean next-token loss, max |logit difference|, and the sink metric of
  DESIGN.md from the eager attention probabilities: alpha_k = 1/(T-k+1) sum_{i>=k} A[i,k] (code: position
  p = k-1, alpha[p] = mean of column p on and below the diagonal), Sink_1^eps = 100 * mean over samples,
  layers and heads of [alpha_1 > eps] (the reference code's per-sample averaging);
* input sets (T = 64, no BOS, as the GGUF's add_bos_token=false and data_prep's policy say): natural text
  (the first --n-per-domain survey inputs per mini-corpus domain, made by data_prep survey-inputs from
  data/mini/pile_mini.jsonl.zst with the imported tokenizer), uniformly random non-special tokens, and one
  random non-special token repeated T times;
* the tokenizer: how many natural documents transformers' GGUF tokenizer encodes differently from the
  imported tokenizer.json (transformers 5.23 ignores tokenizer.ggml.pre 'smollm', so it does not split
  digits one by one as SmolLM2's tokenizer.json and llama.cpp do; differences should all involve digits).

--tokens FILE (a survey-inputs .h5: every /<domain>/tokens [n,T]; or a .npy int array [n,T]) replaces the
natural-text set; --dump-alpha OUT.npz writes the reference model's sample-mean alpha[L,H,K] per input set
("<set>/alpha", float64), with "<set>/sink" (percent, one per --sink-eps), "<set>/loss", "<set>/n_seq",
"<set>/tokens" (the exact inputs, int32 [n,T], so that random/repeated can be replayed), "natural_all/*"
(all natural sets pooled), "eps", "T".

Cost: about 9 minutes in float32 on two busy CPU cores for the default sets (2 x 100 sequences of 64 tokens
with attention probabilities kept); --dtype float64 about twice that.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # before tqdm is imported: transformers' GGUF loader draws a bar

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT))

from data_prep.gguf_import import import_gguf  # noqa: E402

DEFAULT_GGUF = REPO_ROOT / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_PILE = REPO_ROOT / "data" / "mini" / "pile_mini.jsonl.zst"


def load_models(gguf_path: Path, hf_dir: Path, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=dtype,
                                               attn_implementation="eager").eval()
    ours = LlamaForCausalLM.from_pretrained(str(hf_dir), dtype=dtype, attn_implementation="eager").eval()
    return ref, ours


def compare_weights(ref, ours) -> float:
    a, b = ref.state_dict(), ours.state_dict()
    if set(a) != set(b):
        print(f"weights: parameter names differ: only reference {sorted(set(a) - set(b))[:5]}, "
              f"only imported {sorted(set(b) - set(a))[:5]}")
    worst, worst_name = 0.0, ""
    for name in sorted(set(a) & set(b)):
        if a[name].shape != b[name].shape or a[name].dtype != b[name].dtype:
            # e.g. a future transformers keeping the GGUF blocks packed (its GgufLinear path)
            print(f"weights: {name}: {a[name].dtype} {tuple(a[name].shape)} (reference) vs "
                  f"{b[name].dtype} {tuple(b[name].shape)} (imported)")
            return float("inf")
        d = (a[name] - b[name]).abs().max().item()
        if d > worst:
            worst, worst_name = d, name
    print(f"weights: {len(a)} tensors, max |reference - imported| = {worst:.3g}"
          + (f" (in {worst_name})" if worst_name else ""))
    return worst


def alpha_of(attn: torch.Tensor, K: int) -> torch.Tensor:
    """attn [B,H,T,T] -> alpha [B,H,K]: alpha[p] = 1/(T-p) sum_{i=p}^{T-1} A[i,p] (float64)."""
    T = attn.shape[-1]
    cols = attn.double().tril().sum(dim=-2)  # [B,H,T]: column sums on and below the diagonal
    return (cols / torch.arange(T, 0, -1, dtype=torch.float64))[..., :K]


@torch.no_grad()
def run(model, tokens: np.ndarray, K: int, batch: int = 16):
    """Mean next-token loss (float64 from the model's logits), logits [n,T,V] (model dtype), and
    alpha [n,L,H,K] (float64) of every sequence."""
    losses, logits_all, alphas = [], [], []
    for s in range(0, len(tokens), batch):
        ids = torch.from_numpy(tokens[s:s + batch].astype(np.int64))
        out = model(input_ids=ids, output_attentions=True)
        logits = out.logits
        losses.append(F.cross_entropy(logits[:, :-1].double().reshape(-1, logits.shape[-1]),
                                      ids[:, 1:].reshape(-1), reduction="sum").item())
        logits_all.append(logits)
        alphas.append(torch.stack([alpha_of(a, K) for a in out.attentions], dim=1))  # [B,L,H,K]
    n_pred = tokens.shape[0] * (tokens.shape[1] - 1)
    return sum(losses) / n_pred, torch.cat(logits_all), torch.cat(alphas)


def sink(alpha: torch.Tensor, eps: float, p: int = 0) -> float:
    """Sink_{p+1}^eps in percent: per-sample thresholding, mean over samples, layers, heads."""
    return 100.0 * (alpha[..., p] > eps).double().mean().item()


def natural_inputs(pile: Path, hf_dir: Path, n_per_domain: int, T: int, work: Path) -> dict[str, np.ndarray]:
    from data_prep.survey_inputs import build_survey_inputs

    out = work / "survey_inputs.h5"
    build_survey_inputs([str(pile)], [str(hf_dir)], out=str(out), n=n_per_domain, T=T, seed=0, quiet=True)
    return read_token_file(out)


def read_token_file(path: Path) -> dict[str, np.ndarray]:
    if path.suffix == ".npy":
        return {"tokens": np.load(path)}
    import h5py

    with h5py.File(path, "r") as f:
        sets = {name: f[name]["tokens"][:] for name in f if isinstance(f[name], h5py.Group) and "tokens" in f[name]}
    if not sets:
        sys.exit(f"{path}: no /<domain>/tokens datasets")
    return sets


def special_ids(hf_dir: Path) -> set[int]:
    tok = json.loads((hf_dir / "tokenizer.json").read_text())
    return {t["id"] for t in tok["added_tokens"]}


def compare_tokenizers(gguf_path: Path, hf_dir: Path, texts: list[str]) -> None:
    """Counts documents that transformers' GGUF tokenizer encodes differently from ours, and again with
    our pre-tokenizer's digit split removed (GPT-2's regex alone, what transformers uses for 'smollm'):
    if the digit split is the only difference, the second count is 0."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    ours = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    j = json.loads(ours.to_str())
    pre = j["pre_tokenizer"]
    j["pre_tokenizer"] = next(p for p in pre["pretokenizers"] if p["type"] == "ByteLevel") \
        if pre and pre["type"] == "Sequence" else pre
    ours_no_digit_split = Tokenizer.from_str(json.dumps(j))
    ref = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    differ = differ_without_digit_split = 0
    for text in texts:
        b = ref(text, add_special_tokens=False)["input_ids"]
        differ += ours.encode(text, add_special_tokens=False).ids != b
        differ_without_digit_split += ours_no_digit_split.encode(text, add_special_tokens=False).ids != b
    print(f"tokenizer: of {len(texts)} mini-corpus documents, transformers' GGUF tokenizer encodes {differ} "
          f"differently from the imported tokenizer.json, and {differ_without_digit_split} once the "
          "imported one's digit split is removed")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF)
    ap.add_argument("--hf-dir", type=Path, help="imported directory to check (default: import into a temp dir)")
    ap.add_argument("--pile", type=Path, default=DEFAULT_PILE)
    ap.add_argument("--n-per-domain", type=int, default=4)
    ap.add_argument("--n-random", type=int, default=16)
    ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--max-k", type=int, default=64, help="positions kept in alpha[L,H,K]")
    ap.add_argument("--tokens", type=Path, help="token file instead of the natural-text set (.h5 survey inputs or .npy)")
    ap.add_argument("--dump-alpha", type=Path, help="write the reference's alpha[L,H,K] per input set (.npz)")
    ap.add_argument("--sink-eps", default="0.2,0.3,0.4")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    import importlib.metadata

    import transformers

    transformers.utils.logging.disable_progress_bar()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, gguf "
          f"{importlib.metadata.version('gguf')}; {a.gguf}")
    eps = [float(e) for e in a.sink_eps.split(",")]
    dtype = getattr(torch, a.dtype)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        hf_dir = a.hf_dir
        if hf_dir is None or not (hf_dir / "config.json").exists():
            hf_dir = hf_dir or work / "smollm2"
            import_gguf(a.gguf, hf_dir)
        ref, ours = load_models(a.gguf, hf_dir, dtype)
        weights_equal = compare_weights(ref, ours) == 0.0

        if a.tokens:
            natural = read_token_file(a.tokens)
        else:
            natural = natural_inputs(a.pile, hf_dir, a.n_per_domain, a.T, work)
            from data_prep.pile import read_pile
            texts = [d.text for d in read_pile([a.pile])][:: 40]
            compare_tokenizers(a.gguf, hf_dir, texts)
        sets = natural
        T = next(iter(sets.values())).shape[1]
        K = min(a.max_k, T)
        rng = np.random.default_rng(0)
        vocab = ours.config.vocab_size
        allowed = np.setdiff1d(np.arange(vocab), np.fromiter(special_ids(hf_dir), dtype=np.int64))
        sets_extra = {"random": rng.choice(allowed, size=(a.n_random, T)),
                      "repeated": np.repeat(rng.choice(allowed, size=(a.n_random, 1)), T, axis=1)}

        print(f"inputs: T={T}, no BOS; natural: {sum(len(t) for t in sets.values())} sequences over "
              f"{len(sets)} sets; random and repeated: {a.n_random} each; dtype {a.dtype}")
        header = (f"{'input':<22}{'n':>5}{'loss ref':>11}{'loss ours':>11}{'max|dlogit|':>13}{'alpha_1':>9}"
                  + "".join(f"{'Sink^' + str(e):>10}" for e in eps) + f"{'max|dalpha|':>13}")
        print(header)
        dump = {"eps": np.asarray(eps), "T": np.asarray(T)}

        def report(name, tokens):
            loss_r, logits_r, alpha_r = run(ref, tokens, K)
            loss_o, logits_o, alpha_o = run(ours, tokens, K)
            dlogit = (logits_r - logits_o).abs().max().item()
            dalpha = (alpha_r - alpha_o).abs().max().item()
            print(f"{name:<22}{len(tokens):>5}{loss_r:>11.5f}{loss_o:>11.5f}{dlogit:>13.3g}"
                  f"{alpha_r[..., 0].mean().item():>9.4f}" + "".join(f"{sink(alpha_r, e):>10.2f}" for e in eps)
                  + f"{dalpha:>13.3g}")
            dump[f"{name}/alpha"] = alpha_r.mean(dim=0).numpy()
            dump[f"{name}/sink"] = np.asarray([sink(alpha_r, e) for e in eps])
            dump[f"{name}/loss"] = np.asarray(loss_r)
            dump[f"{name}/n_seq"] = np.asarray(len(tokens))
            dump[f"{name}/tokens"] = np.asarray(tokens, dtype=np.int32)
            return loss_r, loss_o, alpha_r, dlogit

        worst_logit, pooled = 0.0, []
        for name, tokens in sets.items():
            loss_r, loss_o, alpha_r, dl = report(name, tokens)
            worst_logit = max(worst_logit, dl)
            pooled.append((loss_r, loss_o, alpha_r))
        if len(sets) > 1:  # all natural sets together: losses weighted by sequences, Sink over all samples
            n = sum(len(p[2]) for p in pooled)
            alpha = torch.cat([p[2] for p in pooled])
            print(f"{'natural (all sets)':<22}{n:>5}{sum(p[0] * len(p[2]) for p in pooled) / n:>11.5f}"
                  f"{sum(p[1] * len(p[2]) for p in pooled) / n:>11.5f}{'':>13}{alpha[..., 0].mean().item():>9.4f}"
                  + "".join(f"{sink(alpha, e):>10.2f}" for e in eps))
            dump["natural_all/alpha"] = alpha.mean(dim=0).numpy()
            dump["natural_all/sink"] = np.asarray([sink(alpha, e) for e in eps])
            dump["natural_all/n_seq"] = np.asarray(n)
        for name, tokens in sets_extra.items():
            worst_logit = max(worst_logit, report(name, tokens)[3])
        if a.dump_alpha:
            np.savez_compressed(a.dump_alpha, **dump)
            print(f"wrote {a.dump_alpha}: alpha[L,H,K] = {dump[next(iter(sets)) + '/alpha'].shape} per input set")
    tol = 1e-4 if a.dtype == "float32" else 1e-10
    ok = weights_equal and worst_logit <= tol
    print(f"{'OK' if ok else 'FAILED'}: weights equal: {'yes' if weights_equal else 'no'}; max |logit difference| "
          f"{worst_logit:.3g} (tolerance {tol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
