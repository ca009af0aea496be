"""Section "Fine-tuning stability", on its own step axis (pre-training runs are in their sections): paper
App. D (sinklab-sft runs, attribute init_from): Fig. 30, training loss and gradient norm over the
fine-tuning steps with the stability monitor's events marked; valid loss and Sink_1^eps over the
fine-tuning steps; and the sink of the base model (eval step 0) beside the fine-tuned one (last eval),
Table 1 (right) layout. Each run adds a finding: its steps, non-finite steps and spikes, the sink before
and after.
"""
from analysis import figures
from analysis.results import EVENT_KINDS, match_eps
from analysis.sections.labels import checkpoint_name, eps_col, run_labels
from analysis.tables import Table, plain_float


def _events_of(r):
    """[(step, kind name)] of a run's monitor events."""
    if not r.events or "step" not in r.events or "kind" not in r.events:
        return []
    return [(int(s), EVENT_KINDS.get(int(k), f"kind {int(k)}")) for s, k in zip(r.events["step"], r.events["kind"])]


def write_section(rep, data):
    """Paper App. D: Fig. 30 over the fine-tuning runs and the before/after sink (Table 1 right layout)."""
    runs, eps = data.runs, data.eps
    labels = run_labels(runs)
    sft = [(label, r) for label, r in zip(labels, runs) if r.init_from]
    if not sft:
        return  # no fine-tuning run: nothing to say
    rep.section("Fine-tuning stability (paper App. D, Fig. 30)", anchor="sft")
    series, fig = [], None
    for label, r in sft:
        if not r.train or not {"step", "loss", "grad_norm"} <= set(r.train):
            rep.skipped(f"fine-tuning run {label}", "no train step/loss/grad_norm columns (Fig. 30)")
            continue
        series.append((label, r.train["step"], r.train["loss"], r.train["grad_norm"], _events_of(r)))
    if series:
        fig = rep.figure("fig30_sft_stability", "Fine-tuning: training loss and gradient norm (Fig. 30)",
                         "Training loss and gradient norm (before clipping) over the fine-tuning steps of "
                         f"{', '.join(s[0] for s in series)}; markers: the stability monitor's events.",
                         figures.sft_stability, series)
    evals = [(label, r.eval, match_eps(r.eval.eps, eps)) for label, r in sft
             if r.eval is not None and len(r.eval.step) >= 2 and match_eps(r.eval.eps, eps) is not None]
    if evals:
        rep.figure("sft_evals", f"Fine-tuning: valid loss and Sink_1^{eps:g}",
                   f"Validation loss and Sink_1^{eps:g} of {', '.join(e[0] for e in evals)} over the fine-tuning "
                   "steps (step 0: the base checkpoint), on their own axis: pre-training steps are in the training "
                   "sections.", figures.runs_compare, evals, eps, xlabel="fine-tuning step")
    cols = ["run", "base checkpoint", f"base {eps_col('Sink_1', eps)}", f"fine-tuned {eps_col('Sink_1', eps)}",
            "base valid loss", "fine-tuned valid loss", "steps", "non-finite steps", "spike events"]
    rows, stars = [], set()
    for label, r in sft:
        ev = r.eval
        i = None if ev is None else match_eps(ev.eps, eps)
        have = ev is not None and i is not None and len(ev.step) >= 2 and int(ev.step[0]) == 0
        if not have:
            rep.skipped(f"fine-tuning run {label}",
                        f"no evaluations at step 0 and later with Sink_1 at eps={eps:g} (the before/after table)")
        nonfinite = int(r.monitor["nonfinite_steps"][-1]) if r.monitor and "nonfinite_steps" in r.monitor and \
            len(r.monitor["nonfinite_steps"]) else None
        spikes = sum(k != "non-finite step" for _, k in _events_of(r))
        steps = len(r.train["loss"]) if r.train and "loss" in r.train else None
        text = f"{label} (fine-tuning {checkpoint_name(r.init_from)}): {steps if steps is not None else '?'} steps, " \
               f"{nonfinite if nonfinite is not None else '?'} non-finite, {spikes} loss or gradient-norm spike(s)"
        if have:
            star = "*" if ev.proxy else ""
            text += (f"; Sink_1^{eps:g} {float(ev.sink[0, i]):.2f} %{star} before, "
                     f"{float(ev.sink[-1, i]):.2f} %{star} after")
        rep.finding(text + ".", fig)
        rows.append([label, checkpoint_name(r.init_from), plain_float(ev.sink[0, i]) if have else None,
                     plain_float(ev.sink[-1, i]) if have else None,
                     plain_float(ev.valid_loss[0]) if have else None, plain_float(ev.valid_loss[-1]) if have else None,
                     len(r.train["loss"]) if r.train and "loss" in r.train else None, nonfinite, spikes])
        if have and ev.proxy:
            stars.update({(len(rows) - 1, 2), (len(rows) - 1, 3)})
    fmts = {cols[2]: ".2f", cols[3]: ".2f", cols[4]: ".4f", cols[5]: ".4f"}
    rep.table(Table("sft_sink_before_after", f"Sink_1^{eps:g} (%) of the base model (the fine-tuning run's "
                    "evaluation at step 0) and of the fine-tuned one (its last evaluation), on the same probe "
                    "sequences; Table 1 (right): base vs chat", cols, rows, fmts, stars))
