"""Sizing pre-training job files on paper: compute, memory, GPU-hours and gradient traffic per job.

    python -m analysis.plan jobs/pretrain                      # every *.ini below, one row each, and the total
    python -m analysis.plan jobs/pretrain/1b_default.ini --mfu 0.35 --link-gbps 200
    python -m analysis.plan jobs/pretrain --from-results results/1b_default/results.h5

The model behind each column (f32 throughout, as the trainer runs today; GiB = 2^30 bytes):
- GFLOP/tok: the trainer's own count (Transformer::flops_per_token, the PaLM/nanoGPT count its MFU uses):
  6 x every parameter but the token and learned-position embedding tables + 12 L H d_head T, T the sequence
  the model runs on (context, plus the sink token where there is one).
- tokens: steps x global-batch-tokens.
- Memory per rank: weights 4 B, gradients 4 B and AdamW's m and v 8 B per parameter ("state"); "Z1" the
  same with the AdamW state split over the job's ranks (ZeRO-1; weights and gradients stay whole). "acts":
  the buffer Transformer::ensure_activations allocates for one micro-batch of micro-batch-rows rows: per
  layer x_in, xn1, rstd1, qkv, att, stats, x_mid, xn2, rstd2, ffn_in, ffn_h (and each variant's extras),
  then the final norm's, a logits chunk of floor(16 Mi / vocab) rows and backward's workspace, every
  tensor rounded up to 64 bytes, without recomputation; "acts attn" / "acts block" the same under
  --recompute attention (the attention block's mixing held once for all layers, not per layer) / block
  (only each layer's input kept per layer). "need" = the state as the job runs it (Z1 where it sets
  zero1, marked z) + the acts of its --recompute (marked r when not none). Not counted: the CUDA context, cuBLAS/cuDNN
  workspaces, NCCL buffers, allocator slack, the evaluation's batch.
- GPU-h = FLOPs per token x tokens / (MFU x peak per GPU), over all GPUs; "step s" is one optimizer step's
  compute time at that MFU. MFU: --mfu, or the median of /runs/<run-name>/train/mfu of a --from-results
  file holding the job's run (marked *).
- NCCL: a ring all-reduce of the f32 gradients (every parameter) sends 2 (n-1)/n x their bytes per rank
  per step (ZeRO-1's reduce-scatter + all-gather of the parameters: the same total); "comm s" is that at
  --link-gbps per GPU, each GPU's ring traffic crossing the nodes on its own link (jobs on > 1 node; a
  one-node ring stays on NVLink: "-"), without overlap with backward.
Ranks: the job file's `#SBATCH --nodes=N --gpus-per-node=G` comment, N x G (none: 1 rank); CPU job files
(device cpu, the default) get a row but no GPU-hours.
"""
import argparse
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analysis.results import ResultsError, ini_settings, open_results, tokens_text

GIB = 2.0 ** 30
LOGITS_CHUNK_FLOATS = 16 << 20  # Transformer::ensure_activations: logits in row chunks of <= ~16M floats
GATED_FFNS = ("swiglu", "geglu", "reglu")
# Defaults of what a job file may omit (src/model/config.hpp, src/train/train_config.cpp).
MODEL_DEFAULTS = {"n-kv-heads": "0", "ffn": "swiglu", "pos-emb": "rope", "relative-bias": "learned",
                  "relative-buckets": "32", "norm-placement": "pre", "norm-type": "rms", "head-combine": "concat",
                  "attn-bias": "none", "bias-per-head": "true", "k-bias-dims": "0", "qk-kernel": "identity",
                  "sink-logit": "false", "attn-gate": "none"}
TRAIN_DEFAULTS = {"zero1": "false", "device": "cpu", "recompute": "none"}
REQUIRED = ("vocab-size", "d-model", "n-layers", "n-heads", "ffn-hidden", "context", "steps",
            "global-batch-tokens", "micro-batch-rows")


class PlanError(Exception):
    """A job file or argument that cannot be sized; str() is one line naming it."""


@dataclass
class Job:
    name: str
    settings: dict  # the file's settings over the defaults
    nodes: int
    ranks: int

    def get(self, key):
        return self.settings[key]

    def int(self, key):
        try:
            return int(self.settings[key])
        except ValueError:
            raise PlanError(f"{self.name}: {key} = {self.settings[key]!r} is not an integer") from None

    def flag(self, key):
        return self.settings[key] in ("true", "1")


def read_job(path, name):
    """The job file's settings (analysis.results.ini_settings over the trainer's defaults) and its ranks."""
    text = Path(path).read_text()
    settings = {**MODEL_DEFAULTS, **TRAIN_DEFAULTS, **ini_settings(text)}
    missing = [k for k in REQUIRED if k not in settings]
    if missing:
        raise PlanError(f"{name}: not a pre-training job file: no {', '.join(missing)}")
    nodes, gpus = 1, 1
    for line in text.splitlines():
        if line.startswith("#SBATCH"):
            options = line[len("#SBATCH"):].split("#", 1)[0]
            nodes = int(_option(options, "nodes") or nodes)
            gpus = int(_option(options, "gpus-per-node") or gpus)
    job = Job(name, settings, nodes, nodes * gpus)
    per_micro = job.int("context") * job.int("micro-batch-rows") * job.ranks
    if job.int("global-batch-tokens") % per_micro:
        raise PlanError(f"{name}: global-batch-tokens is not a multiple of context x micro-batch-rows x ranks "
                        f"= {per_micro} (the trainer refuses it)")
    return job


def _option(options, name):
    """The count of --name=V or --name V ([type:]V for GPUs) on an #SBATCH line, None when absent."""
    m = re.search(rf"--{name}[= ](?:\w+:)?(\d+)", options)
    return m.group(1) if m else None


def shape(job):
    """The model dimensions the counts below use."""
    d, H = job.int("d-model"), job.int("n-heads")
    Hkv = job.int("n-kv-heads") or H
    bias = job.get("attn-bias")
    return dict(V=job.int("vocab-size"), d=d, L=job.int("n-layers"), H=H, Hkv=Hkv, dh=d // H,
                F=job.int("ffn-hidden"), C=job.int("context"), gated=job.get("ffn") in GATED_FFNS,
                lead_pos=1 if bias == "sink-token" else 0, lead_keys=1 if bias in ("kv", "k") else 0,
                layer_norm=job.get("norm-type") == "layer", post=job.get("norm-placement") == "post")


def parameters(job):
    """(all parameters, the ones flops_per_token multiplies: all but the embedding tables), as
    src/model/config.cpp's param_layout lays them out (alignment padding left out)."""
    s = shape(job)
    d, H, dh, F = s["d"], s["H"], s["dh"], s["F"]
    norm = d * (2 if s["layer_norm"] else 1)
    bias_heads = H if job.flag("bias-per-head") else 1
    layer = 2 * norm + (H + 2 * s["Hkv"]) * dh * d + (3 if s["gated"] else 2) * F * d
    layer += d * (dh if job.get("head-combine") == "add" else H * dh)  # o_proj
    layer += 2 * dh * dh if job.get("qk-kernel") == "mlp" else 0
    layer += bias_heads * (job.int("k-bias-dims") or dh) if s["lead_keys"] else 0
    layer += bias_heads * dh if job.get("attn-bias") in ("kv", "v") else 0
    layer += H if job.flag("sink-logit") else 0
    gate = {"none": 0, "headwise": H, "elementwise": H * dh}[job.get("attn-gate")]
    layer += gate * d
    embeddings = s["V"] * d + ((s["C"] + s["lead_pos"]) * d if job.get("pos-emb") == "learned" else 0)
    other = s["V"] * d + (0 if s["post"] else norm)  # lm_head, final norm
    other += d if s["lead_pos"] else 0  # the sink token
    if job.get("pos-emb") == "relative" and job.get("relative-bias") == "learned":
        other += H * job.int("relative-buckets")
    counted = s["L"] * layer + other
    return counted + embeddings, counted


def flops_per_token(job):
    """Transformer::flops_per_token: 6 x the multiplied parameters + 12 L H d_head T."""
    s = shape(job)
    return 6.0 * parameters(job)[1] + 12.0 * s["L"] * s["H"] * s["dh"] * (s["C"] + s["lead_pos"])


RECOMPUTE_MODES = ("none", "attention", "block")


def activation_bytes(job, recompute=None):
    """Bytes of Transformer::ensure_activations' buffer for micro-batch-rows rows (f32, 64-byte rounded)
    under --recompute (default: the job's): each layer's kept tensors, once the tensors every layer
    recomputes (attention: the attention block's mixing; block: all but the layer's input), and the rest."""
    mode = recompute or job.get("recompute")
    if mode not in RECOMPUTE_MODES:
        raise PlanError(f"{job.name}: recompute = {mode!r} is not one of {' | '.join(RECOMPUTE_MODES)}")
    s = shape(job)
    B, T = job.int("micro-batch-rows"), s["C"] + s["lead_pos"]
    N, d, F, V, H, dh = B * T, s["d"], s["F"], s["V"], s["H"], s["dh"]
    qkv, feat, ffn_in = (H + 2 * s["Hkv"]) * dh, (H + s["Hkv"]) * dh, (2 if s["gated"] else 1) * F
    kernel, mlp = job.get("qk-kernel") != "identity", job.get("qk-kernel") == "mlp"
    gate, headwise = job.get("attn-gate") != "none", job.get("attn-gate") == "headwise"
    add = job.get("head-combine") == "add"
    pre, ln, lead = not s["post"], s["layer_norm"], s["lead_keys"] > 0
    ext = B * (s["lead_keys"] + T) * s["Hkv"] * dh
    # (floats, part of the attention block's mixing), in the allocation order; x_in first, always kept.
    layer = [(pre * N * d, pre), (N, pre), (ln * N, pre), (N * qkv, True), (kernel * N * feat, True),
             (mlp * N * feat, True), (mlp * N * feat, True), (kernel * N * feat, True), (lead * ext, True),
             (lead * ext, True), (N * H * dh, True), ((job.get("attn-bias") == "v") * N * H * dh, True),
             (B * H * T, True), (gate * N * H * dh, True), (gate * N * H * dh, True), (add * N * dh, True),
             (s["post"] * N * d, False), (N * d, False), (pre * N * d, False), (N, False), (ln * N, False),
             (N * ffn_in, False), (N * F, False), (s["post"] * N * d, False)]
    recomputed = [n for n, mix in layer if mode == "block" or (mode == "attention" and mix)]
    kept = [N * d] + [n for n, mix in layer if not (mode == "block" or (mode == "attention" and mix))]
    logits_rows = min(max(LOGITS_CHUNK_FLOATS // V, 1), N)
    rest = [N * d, pre * N * d, N, ln * N, logits_rows * V, N] + [N * d] * 5 + [
        N * qkv, kernel * N * feat, mlp * N * feat, lead * ext, lead * ext, N * H * dh, gate * N * H * dh,
        add * N * dh, gate * N * H * dh, headwise * N * H, s["post"] * N * d, N * ffn_in, N * F, N * d, H,
        H * job.int("relative-buckets")]

    def rounded(floats):
        return sum((4 * n + 63) // 64 * 64 for n in floats if n)
    return s["L"] * rounded(kept) + rounded(recomputed) + rounded(rest)


def memory_per_rank(job):
    """GiB per rank: (state without ZeRO-1, state with it, {recompute mode: activations}, what the job as
    configured needs: its ZeRO-1 setting and its recompute mode)."""
    n = parameters(job)[0]
    state = 4 * n + 4 * n + 8 * n
    zero1 = 4 * n + 4 * n + 8 * n / job.ranks
    acts = {mode: activation_bytes(job, mode) / GIB for mode in RECOMPUTE_MODES}
    need = (zero1 if job.flag("zero1") else state) / GIB + acts[job.get("recompute")]
    return state / GIB, zero1 / GIB, acts, need


def allreduce(job, link_gbps):
    """(bytes each rank sends per step in a ring all-reduce of the f32 gradients, its time over the nodes'
    links in seconds; None on one node)."""
    n = job.ranks
    sent = 2 * (n - 1) / n * 4 * parameters(job)[0]
    return sent, (sent / (link_gbps * 1e9 / 8) if job.nodes > 1 else None)


def measured_mfu(paths):
    """{run name: median of its /runs/<run>/train/mfu (finite, > 0)} of the results files."""
    out = {}
    for path in paths:
        with open_results(path) as rf:
            for run in rf.runs:
                mfu = np.asarray((run.train or {}).get("mfu", []), dtype=float)
                mfu = mfu[np.isfinite(mfu) & (mfu > 0)]
                if len(mfu):
                    out[run.name] = float(statistics.median(mfu))
    return out


def job_files(paths):
    """[(file, name printed)]: a file as given, a folder's *.ini recursively (named relative to it)."""
    out = []
    for arg in paths:
        p = Path(arg)
        if p.is_file():
            out.append((p, arg))
        elif p.is_dir():
            found = sorted(p.rglob("*.ini"))
            if not found:
                raise PlanError(f"{arg}: no *.ini job files in this folder")
            out += [(f, f.relative_to(p).as_posix()) for f in found]
        else:
            raise PlanError(f"{arg}: no such job file or folder")
    return out


HEADER = ("job", "dev", "ranks", "GFLOP/tok", "tokens", "state GiB", "Z1 GiB", "acts GiB", "acts attn", "acts block",
          "need GiB", "MFU",
          "GPU-h", "step s", "NCCL GiB/step", "comm s")


def row(job, mfu, measured, args):
    """One table row (texts) and the job's GPU-hours (None for a CPU job)."""
    fpt = flops_per_token(job)
    tokens = job.int("steps") * job.int("global-batch-tokens")
    state, zero1, acts, need = memory_per_rank(job)
    sent, comm = allreduce(job, args.link_gbps)
    gpu = job.get("device") == "cuda"
    rate = mfu * args.peak_tflops * 1e12
    hours = fpt * tokens / rate / 3600 if gpu else None
    step = fpt * job.int("global-batch-tokens") / (rate * job.ranks)
    cells = (job.name, job.get("device"), str(job.ranks), f"{fpt / 1e9:.3f}", tokens_text(tokens).replace(" ", ""),
             f"{state:.2f}", f"{zero1:.2f}", f"{acts['none']:.2f}", f"{acts['attention']:.2f}", f"{acts['block']:.2f}",
             f"{need:.2f}" + ("z" if job.flag("zero1") else "") + ("" if job.get("recompute") == "none" else "r"),
             (f"{mfu:.2f}" + ("*" if measured else "")) if gpu else "-", f"{hours:.1f}" if gpu else "-",
             f"{step:.3f}" if gpu else "-", f"{sent / GIB:.2f}", f"{comm:.3f}" if comm is not None else "-")
    return cells, hours


def print_table(rows):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())


def main(argv):
    ap = argparse.ArgumentParser(prog="python -m analysis.plan", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="job files or folders of them (searched recursively)")
    ap.add_argument("--mfu", type=float, default=0.40, help="model FLOPs utilisation (default 0.40)")
    ap.add_argument("--from-results", action="append", default=[], metavar="RESULTS_H5",
                    help="take a job's MFU from its run's median train/mfu in this file (repeatable)")
    ap.add_argument("--peak-tflops", type=float, default=989.4, help="dense peak per GPU (default: H100 bf16, 989.4)")
    ap.add_argument("--link-gbps", type=float, default=400.0, help="Gb/s per GPU between nodes (default 400)")
    args = ap.parse_args(argv)
    try:
        if not (args.mfu > 0 and args.peak_tflops > 0 and args.link_gbps > 0):
            raise PlanError("--mfu, --peak-tflops and --link-gbps must be positive")
        measured = measured_mfu(args.from_results)
        rows, total, gpu_jobs = [HEADER], 0.0, 0
        for path, name in job_files(args.paths):
            job = read_job(path, name)
            run = job.settings.get("run-name")
            cells, hours = row(job, measured.get(run, args.mfu), run in measured, args)
            rows.append(cells)
            if hours is not None:
                total, gpu_jobs = total + hours, gpu_jobs + 1
    except (PlanError, ResultsError, OSError) as e:
        print(f"analysis.plan: error: {e}", file=sys.stderr)
        return 2
    print_table(rows)
    print(f"total: {len(rows) - 1} job files, {total:,.1f} GPU-hours ({gpu_jobs} GPU jobs) at "
          f"{args.peak_tflops:g} TFLOP/s peak per GPU")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
