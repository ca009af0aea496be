"""Prints what a sinklab results file holds, as plain-text tables: for each training run the eval
series (step, valid loss, Sink_1^eps, massive-activation ratio of the last layer) and for each probed
model the Sink_1^eps per input mode (the paper's Table 1 layout).

    python -m analysis.summary results/run/results.h5 [more.h5 ...]
"""
import sys

import h5py
import numpy as np


def _eval_table(name, g):
    eps = str(g.attrs.get("sink_eps", "")).split(",")
    sink = g["sink"][:]  # [step, eps], percent
    print(f"\nrun {name}: evaluation over training")
    header = f"{'step':>8} {'valid loss':>11} " + " ".join(f"{'Sink1^' + e:>11}" for e in eps)
    header += f" {'massive(L)':>11}"
    print(header)
    steps = g["step"][:]
    massive = g["massive_ratio"][:] if "massive_ratio" in g else None
    for i, step in enumerate(steps):
        line = f"{int(step):>8} {g['valid_loss'][i]:>11.4f} " + " ".join(f"{v:>10.2f}%" for v in sink[i])
        if massive is not None:
            line += f" {massive[i, -1]:>11.2f}"
        print(line)


def _train_line(name, g):
    loss = g["loss"][:]
    tps = g["tokens_per_s"][:]
    print(f"\nrun {name}: {len(loss)} steps, loss {loss[0]:.4f} -> {loss[-1]:.4f}, "
          f"median {np.median(tps):.0f} tokens/s")


def _models_table(models):
    print("\nprobed models: Sink_1^eps (%) by input")
    for model in models:
        for inp in models[model]:
            for domain in models[model][inp]:
                g = models[model][inp][domain]
                eps = g["sink_eps"][:]
                sinks = ", ".join(f"eps={e:g}: {s:.2f}" for e, s in zip(eps, g["sink"][:]))
                print(f"  {model:<24} {inp:<8} {domain:<14} {sinks}   "
                      f"(n_seq={g.attrs['n_seq']}, T={g.attrs['T']})")


def summarize(path):
    print(f"== {path}")
    with h5py.File(path, "r") as f:
        for run, g in f.get("runs", {}).items():
            if "train" in g:
                _train_line(run, g["train"])
            if "eval" in g:
                _eval_table(run, g["eval"])
        if "models" in f:
            _models_table(f["models"])


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    for path in argv:
        summarize(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
