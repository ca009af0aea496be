"""Prints what a sinklab results file holds, as plain-text tables: for each training run the eval
series (step, valid loss, Sink_1^eps, massive-activation ratio of the last layer) and for each probed
model the Sink_1^eps per input mode (the paper's Table 1 layout).

    python -m analysis.summary results/run/results.h5 [more.h5 ...]

analysis.report makes the same tables (and the figures) as Markdown/CSV/PNG in one HTML page. A file that
is not a results file or holds nothing to show (an empty HDF5 file, data_prep's survey inputs) is refused in
one line naming it, exit status 1, before anything is printed.
"""
import sys

import numpy as np

from analysis.results import ResultsError, nothing_to_report, open_results


def _eval_table(run):
    ev = run.eval
    print(f"\nrun {run.name}: evaluation over training")
    header = f"{'step':>8} {'valid loss':>11} " + " ".join(f"{'Sink1^' + f'{e:g}':>11}" for e in ev.eps)
    header += f" {'massive(L)':>11}"
    print(header)
    for i, step in enumerate(ev.step):
        line = f"{int(step):>8} {ev.valid_loss[i]:>11.4f} " + " ".join(f"{v:>10.2f}%" for v in ev.sink[i])
        if ev.massive_ratio is not None:
            line += f" {ev.massive_ratio[i, -1]:>11.2f}"
        print(line)


def _train_line(run):
    loss = run.train.get("loss")
    if loss is None or not len(loss):
        return
    line = f"\nrun {run.name}: {len(loss)} steps, loss {loss[0]:.4f} -> {loss[-1]:.4f}"
    if "tokens_per_s" in run.train:
        line += f", median {np.median(run.train['tokens_per_s']):.0f} tokens/s"
    print(line)


def _models_table(entries):
    print("\nprobed models: Sink_1^eps (%) by input")
    for e in entries:
        sinks = ", ".join(f"eps={eps:g}: {s:.2f}" for eps, s in zip(e.eps, e.sink))
        print(f"  {e.model:<24} {e.input:<8} {e.domain:<14} {sinks}   "
              f"(n_seq={e.attrs.get('n_seq', '?')}, T={e.attrs.get('T', '?')})")


def open_with_content(path):
    """open_results, refusing a file that holds nothing to show (results.nothing_to_report)."""
    rf = open_results(path)
    why = nothing_to_report(rf)
    if why:
        rf.close()
        raise ResultsError(f"{path}: {why}")
    return rf


def summarize(path):
    print(f"== {path}")
    with open_with_content(path) as rf:
        for run in rf.runs:
            if run.train:
                _train_line(run)
            if run.eval:
                _eval_table(run)
            for note in run.notes:
                print(f"  note: {note}")
        if rf.entries:
            _models_table(rf.entries)
        for note in rf.notes + [n for e in rf.entries for n in e.notes]:
            print(f"  note: {note}")


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    try:
        for path in argv:  # every file checked before anything is printed
            open_with_content(path).close()
        for path in argv:
            summarize(path)
    except ResultsError as e:
        print(f"analysis.summary: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
