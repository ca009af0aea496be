"""Prints training runs side by side, one row per evaluation step: the valid loss and Sink_1^eps of each
run (the demo's softmax vs sigmoid-without-normalisation comparison, or any runs of the same schedule),
then each run's mean alpha_1 over layers and heads against its uniform-attention baseline H_T / T (a
sink grows above it long before a thresholded Sink_1 moves off 0%; results.mean_alpha1).

    python -m analysis.compare results/a/results.h5 results/b/results.h5 [--eps 0.3]

Every run in every file is a column group, named by its run name and attention operation. A run whose
attention weights are not a distribution (normaliser other than the plain sum, or rows summing to
alpha != 1) has its Sink_1 from the paper's proxy scores (Sec. 7.4): marked with *. A file without a run with
evaluations (an empty HDF5 file, a survey's results) is refused in one line naming it, exit status 1.
"""
import argparse
import sys
from dataclasses import dataclass

import numpy as np

from analysis.describe import DEFAULTS
from analysis.results import (ResultsError, bos_attention, ini_settings, is_bbm, mean_alpha1, nothing_to_report,
                              open_results)


@dataclass
class Run:
    name: str
    attention: str      # "sim, Z = norm"
    proxy: bool         # Sink_1 from proxy scores
    steps: np.ndarray   # eval steps
    valid_loss: np.ndarray
    sink: np.ndarray    # [eval] at the chosen eps, %
    train_line: str
    alpha1: tuple = None  # results.mean_alpha1: (what, steps, mean alpha_1, uniform baseline), or None
    bos: np.ndarray = None   # Bigram-Backcopy runs: results.bos_attention per eval step, else None
    copy_loss: np.ndarray = None


def read_runs(path, eps):
    """The runs of one results file that have evaluations, Sink_1 at `eps` (through analysis.results);
    ResultsError when it has none (a file given to compare must add a column)."""
    runs = []
    with open_results(path) as rf:
        if not any(run.eval is not None for run in rf.runs):
            why = nothing_to_report(rf) or "no training run with evaluations (/runs/<run>/eval)"
            raise ResultsError(f"{path}: {why}")
        for run in rf.runs:
            ev = run.eval
            if ev is None:
                continue
            matches = [i for i, e in enumerate(ev.eps) if abs(e - eps) < 1e-9]
            if not matches:
                raise SystemExit(f"{path}: run {run.name} has Sink_1 at eps {ev.eps}, not at --eps {eps:g}")
            cfg = ini_settings(run.config)
            sim, norm = cfg.get("attn-sim", DEFAULTS["attn-sim"]), cfg.get("attn-norm", DEFAULTS["attn-norm"])
            # The probe measures proxy scores whenever the weights are not a distribution (probe/model_probe).
            proxy = ev.proxy or norm != "sum" or float(cfg.get("attn-alpha", DEFAULTS["attn-alpha"])) != 1.0
            train_line = ""
            if run.train and len(run.train.get("loss", [])):
                loss = run.train["loss"]
                train_line = f"{len(loss)} steps, train loss {loss[0]:.4f} -> {loss[-1]:.4f}"
                if "tokens_per_s" in run.train:
                    train_line += f", median {np.median(run.train['tokens_per_s']):.0f} tokens/s"
            bbm = is_bbm(run)
            runs.append(Run(run.name, f"{sim}, Z = {norm}", proxy, ev.step, ev.valid_loss, ev.sink[:, matches[0]],
                            train_line, None if bbm else mean_alpha1(run), bos_attention(ev)[0] if bbm else None,
                            ev.copy_loss if bbm else None))
    return runs


def compare_table(runs, eps):
    """The side-by-side table as text."""
    lines = []
    for r in runs:
        lines.append(f"{r.name}: attention {r.attention}{' (Sink_1 from proxy scores)' if r.proxy else ''}"
                     f"{'; ' + r.train_line if r.train_line else ''}")
    # Per run: 3 spaces, valid loss in 10, Sink_1 in 12 (a % sign included).
    group = 3 + 10 + 12
    lines.append("")
    lines.append(f"{'':>6}" + "".join(f"{(r.name + ('*' if r.proxy else ''))[:group - 3]:>{group}}" for r in runs))
    sink_head = f"Sink_1^{eps:g}"
    lines.append(f"{'step':>6}" + "".join(f"   {'valid loss':>10}{sink_head:>12}" for _ in runs))
    for step in sorted({int(s) for r in runs for s in r.steps}):
        cells = []
        for r in runs:
            hit = np.nonzero(r.steps == step)[0]
            if len(hit):
                cells.append(f"   {r.valid_loss[hit[0]]:>10.4f}{r.sink[hit[0]]:>11.2f}%")
            else:
                cells.append(" " * group)
        lines.append(f"{step:>6}" + "".join(cells))
    with_bos = [r for r in runs if r.bos is not None]
    if with_bos:
        lines.append("")
        lines.append("Bigram-Backcopy: BOS attention of the non-trigger queries (best layer and head; * proxy scores) "
                     "and the copy loss (nats):")
        width = 24
        lines.append(f"{'step':>6}" + "".join(f"{(r.name + ('*' if r.proxy else ''))[:width - 3]:>{width}}"
                                              for r in with_bos))
        for step in sorted({int(s) for r in with_bos for s in r.steps}):
            cells = []
            for r in with_bos:
                hit = np.nonzero(r.steps == step)[0]
                cells.append(f"{r.bos[hit[0]]:>12.3f}{r.copy_loss[hit[0]]:>12.3f}" if len(hit) else " " * width)
            lines.append(f"{step:>6}" + "".join(cells))
    with_alpha = [r for r in runs if r.alpha1 is not None]
    if with_alpha:
        lines.append("")
        lines.append("mean alpha_1 over layers and heads (uniform attention: H_T / T):")
        for r in with_alpha:
            what, steps, values, baseline = r.alpha1
            lines.append(f"  {r.name}{' (' + what + ')' if what else ''}: {values[0]:.4f} at step {int(steps[0])} -> "
                         f"{values[-1]:.4f} at step {int(steps[-1])}, uniform baseline {baseline:.4f} "
                         f"({'above' if values[-1] > baseline else 'not above'} it at the end)")
        width = 12
        lines.append(f"{'step':>6}" + "".join(f"{r.name[:width - 1]:>{width}}" for r in with_alpha))
        for step in sorted({int(s) for r in with_alpha for s in r.alpha1[1]}):
            cells = []
            for r in with_alpha:
                hit = np.nonzero(r.alpha1[1] == step)[0]
                cells.append(f"{r.alpha1[2][hit[0]]:>{width}.4f}" if len(hit) else " " * width)
            lines.append(f"{step:>6}" + "".join(cells))
    return "\n".join(lines)


def main(argv):
    parser = argparse.ArgumentParser(description="training runs side by side: valid loss and Sink_1^eps per eval step")
    parser.add_argument("results", nargs="+", help="results.h5 files of sinklab-pretrain")
    parser.add_argument("--eps", type=float, default=0.3, help="threshold of Sink_1^eps (one the runs measured)")
    args = parser.parse_args(argv)
    try:
        runs = [r for path in args.results for r in read_runs(path, args.eps)]
    except ResultsError as e:
        print(f"analysis.compare: {e}", file=sys.stderr)
        return 1
    print(compare_table(runs, args.eps))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
