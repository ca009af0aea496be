"""Section "Sink and downstream accuracy" (paper Fig. 10): each model's Sink_1^eps on natural inputs
beside its multiple-choice accuracy (the survey's hellaswag input).
"""
import numpy as np

from analysis import figures
from analysis.results import match_eps
from analysis.tables import Table


def write_section(rep, data):
    """Sink beside downstream accuracy (paper Fig. 10): each model's Sink_1^eps on natural inputs (mean over
    domains) and its multiple-choice accuracy (the survey's hellaswag input), as a table and a scatter."""
    entries, scores, eps = data.entries, data.scores, data.eps
    if not scores:
        return
    rep.section("Sink and downstream accuracy (Fig. 10)", anchor="downstream")
    sink_of = {}
    for e in entries:
        i = match_eps(e.eps, eps) if len(e.sink) else None
        if e.input == "natural" and i is not None:
            sink_of.setdefault(e.model, []).append(e.sink[i])
    rows, acc_points, norm_points = [], [], []
    for s in scores:
        sink = float(np.mean(sink_of[s.model])) if s.model in sink_of else None
        rows.append([s.model, s.input, sink, s.acc, s.acc_norm, s.n_examples])
        if sink is not None:
            acc_points.append((s.model, sink, s.acc))
            norm_points.append((s.model, sink, s.acc_norm))
    rep.table(Table("downstream", f"Sink_1^{eps:g} (%, natural inputs) and multiple-choice accuracy per model",
                    ["model", "task", f"Sink_1^{eps:g}", "acc", "acc_norm", "examples"], rows,
                    {f"Sink_1^{eps:g}": ".2f", "acc": ".4f", "acc_norm": ".4f"},
                    note="acc: the choice of highest log-likelihood; acc_norm: per character of the choice "
                         "(lm-evaluation-harness's definitions)."))
    if acc_points:
        series = [(name, [p[1] for p in points], [p[2] for p in points], marker)
                  for name, marker, points in (("acc", "o", acc_points), ("acc_norm", "^", norm_points))]
        rep.figure("sink_vs_accuracy", f"Sink_1^{eps:g} against multiple-choice accuracy (Fig. 10)",
                   "Each model's Sink_1 on natural text (mean over domains) against its accuracy.", figures.xy_panels,
                   [{"series": series, "annotate": acc_points + norm_points, "xlabel": f"Sink_1^{eps:g} (%)",
                     "ylabel": "accuracy"}])
    else:
        rep.skipped("Fig. 10 (Sink against accuracy)", "no model has both a hellaswag score and natural inputs")
