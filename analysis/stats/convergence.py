"""When an atlas run has converged: the stopping rule the runner applies after every chunk of training.

A run stops when both hold at its last evaluation:
  (a) the copy loss (eval/copy_loss, over the positions after a trigger) is at most COPY_MARGIN nats: the
      copy rule is deterministic, so its floor is 0 (data_prep bbm's loss_floor, bbm.json);
  (b) the BOS attention (analysis.results.bos_attention: eval/first_attention[..., 0], non-trigger
      queries, the layer and head where it is largest) has stopped moving: its mean over the evaluations
      of the last BOS_WINDOW of the steps differs from its mean over the BOS_WINDOW before by less than
      BOS_STILL (each window at least MIN_EVALS evaluations, else the last MIN_EVALS and the MIN_EVALS
      before them);
or when it reaches the hard cap of steps, which its atlas_status.json then says ("stopped": "cap").
(a) alone would stop a run whose sink is still growing (the BOS attention rises after the copy rule is
learned); (b) alone would stop one on the plateau before the sink forms, where the copy loss is still high.
(b) compares window means, not the spread within the window: from one evaluation to the next the BOS
attention of a formed sink jitters by ~0.01-0.02 (small scale, softmax), so a spread of < 0.01 is a
matter of luck, while the means follow the drift (measured: docs/DESIGN.md, "The emergence atlas").
"""
import numpy as np

from analysis.results import ResultsError, bos_attention, open_results

COPY_MARGIN = 0.1   # nats above the copy loss' floor of 0
BOS_STILL = 0.01    # |mean of the last window - mean of the window before|
BOS_WINDOW = 0.10   # a window: 10 % of the steps run
MIN_EVALS = 3       # ... and at least this many evaluations

RULE = (f"converged: copy loss <= {COPY_MARGIN:g} nats (its floor is 0) at the last evaluation, and the mean BOS "
        f"attention (max over layers and heads of eval/first_attention[..., 0]) of the evaluations in the last "
        f"{BOS_WINDOW:.0%} of the steps differs from the mean of the {BOS_WINDOW:.0%} before by < {BOS_STILL:g} "
        f"(each window at least {MIN_EVALS} evaluations); else trained on in chunks up to the hard cap")


def read_series(results_h5, run_name):
    """(steps, copy loss, BOS attention) of run `run_name` in a results file, arrays over its evaluations."""
    with open_results(results_h5) as rf:
        run = next((r for r in rf.runs if r.name == run_name), None)
        if run is None or run.eval is None:
            raise ResultsError(f"{results_h5}: no evaluations of run {run_name}")
        ev = run.eval
        if ev.copy_loss is None:
            raise ResultsError(f"{results_h5}: run {run_name} has no eval/copy_loss (the job file needs bbm-meta)")
        bos, _, _ = bos_attention(ev)
        if bos is None:
            raise ResultsError(f"{results_h5}: run {run_name} has no eval/first_attention")
        return np.asarray(ev.step), np.asarray(ev.copy_loss, dtype=float), np.asarray(bos, dtype=float)


def check(steps, copy_loss, bos):
    """(converged?, what was measured: {"copy_loss", "bos_attention", "bos_moved", "window_evals"})."""
    steps, copy_loss, bos = np.asarray(steps), np.asarray(copy_loss, dtype=float), np.asarray(bos, dtype=float)
    if len(steps) < 2 * MIN_EVALS:
        return False, {"copy_loss": float(copy_loss[-1]) if len(copy_loss) else None,
                       "bos_attention": float(bos[-1]) if len(bos) else None, "bos_moved": None, "window_evals": 0}
    last_step = steps[-1]
    n = int(np.sum(steps > last_step * (1.0 - BOS_WINDOW)))
    before = int(np.sum((steps > last_step * (1.0 - 2 * BOS_WINDOW)) & (steps <= last_step * (1.0 - BOS_WINDOW))))
    if n < MIN_EVALS or before < MIN_EVALS:
        n = before = MIN_EVALS
    moved = float(np.mean(bos[-n:]) - np.mean(bos[-n - before:-n]))
    measured = {"copy_loss": float(copy_loss[-1]), "bos_attention": float(bos[-1]), "bos_moved": moved,
                "window_evals": n}
    # NaN (a diverged run) fails both comparisons: it trains on to the cap.
    return bool(copy_loss[-1] <= COPY_MARGIN and abs(moved) < BOS_STILL), measured
