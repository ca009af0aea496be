"""Sizing pre-training job files on paper: compute, memory, GPU-hours and gradient traffic per job.

    python -m analysis.plan jobs/pretrain                      # every *.ini below, one row each, and the total
    python -m analysis.plan jobs/pretrain/1b_default.ini --mfu 0.35 --link-gbps 200
    python -m analysis.plan jobs/pretrain --from-results results/1b_default/results.h5

Every figure of a job comes from `sinklab-pretrain --config FILE --describe` (analysis.describe: the binary in
$SINKLAB_BIN_DIR, or build/bin), the code the trainer runs; nothing is re-derived here. The model behind each
column (weights, gradients and AdamW's state f32; activations in the job's --precision: bf16 by default on a GPU,
its statistics f32; GiB = 2^30 bytes):
- GFLOP/tok: the trainer's own count (Transformer::flops_per_token, the PaLM/nanoGPT count its MFU uses):
  6 x every parameter but the token and learned-position embedding tables + 12 L H d_head T, T the sequence
  the model runs on (context, plus the sink token where there is one).
- tokens: steps x global-batch-tokens.
- Memory per rank: weights 4 B, gradients 4 B and AdamW's m and v 8 B per parameter ("state"); "Z1" the
  same with the AdamW state split over the job's ranks (ZeRO-1; weights and gradients stay whole). "acts":
  the buffer Transformer::ensure_activations allocates for one micro-batch of micro-batch-rows rows (the
  trainer's activation_bytes_total) without recomputation; "acts attn" / "acts block" the same under
  --recompute attention / block. "need" = the state as the job runs it (Z1 where it sets zero1, marked z) +
  the acts of its --recompute (marked r when not none). Not counted: the CUDA context, cuBLAS/cuDNN
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analysis.describe import DescribeError, describe
from analysis.results import ResultsError, open_results, tokens_text

GIB = 2.0 ** 30
RECOMPUTE_MODES = ("none", "attention", "block")


class PlanError(Exception):
    """A job file or argument that cannot be sized; str() is one line naming it."""


@dataclass
class Job:
    name: str
    described: dict  # sinklab-pretrain --describe of the file
    nodes: int
    ranks: int

    def get(self, key):
        return self.described["settings"][key]

    def int(self, key):
        return int(self.get(key))

    def flag(self, key):
        return self.get(key) == "true"


def read_job(path, name):
    """The job file as sinklab-pretrain describes it, and its ranks (its #SBATCH comment)."""
    text = Path(path).read_text()
    try:
        described = describe(path, name=name)
    except DescribeError as e:
        raise PlanError(str(e)) from None
    nodes, gpus = 1, 1
    for line in text.splitlines():
        if line.startswith("#SBATCH"):
            options = line[len("#SBATCH"):].split("#", 1)[0]
            nodes = int(_option(options, "nodes") or nodes)
            gpus = int(_option(options, "gpus-per-node") or gpus)
    job = Job(name, described, nodes, nodes * gpus)
    per_micro = job.int("context") * job.int("micro-batch-rows") * job.ranks
    if job.int("global-batch-tokens") % per_micro:
        raise PlanError(f"{name}: global-batch-tokens is not a multiple of context x micro-batch-rows x ranks "
                        f"= {per_micro} (the trainer refuses it)")
    return job


def _option(options, name):
    """The count of --name=V or --name V ([type:]V for GPUs) on an #SBATCH line, None when absent."""
    m = re.search(rf"--{name}[= ](?:\w+:)?(\d+)", options)
    return m.group(1) if m else None


def memory_per_rank(job):
    """GiB per rank: (state without ZeRO-1, state with it, {recompute mode: activations}, what the job as
    configured needs: its ZeRO-1 setting and its recompute mode)."""
    n = job.described["n_params"]
    state = 4 * n + 4 * n + 8 * n
    zero1 = 4 * n + 4 * n + 8 * n / job.ranks
    acts = {mode: job.described["activation_bytes"][mode]["total"] / GIB for mode in RECOMPUTE_MODES}
    need = (zero1 if job.flag("zero1") else state) / GIB + acts[job.get("recompute")]
    return state / GIB, zero1 / GIB, acts, need


def allreduce(job, link_gbps):
    """(bytes each rank sends per step in a ring all-reduce of the f32 gradients, its time over the nodes'
    links in seconds; None on one node)."""
    n = job.ranks
    sent = 2 * (n - 1) / n * 4 * job.described["n_params"]
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
    fpt = job.described["flops_per_token"]
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
        files = job_files(args.paths)
        with ThreadPoolExecutor() as pool:  # one sinklab-pretrain --describe per file
            jobs = list(pool.map(lambda f: read_job(*f), files))
        for job in jobs:
            run = job.get("run-name")
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
