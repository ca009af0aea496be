"""Section "What the sink does: ablations" (sinklab-survey --ablations): the next-token loss under each
ablation beside full attention's, the sink before and after the massive-activation ones, and the loss
against the attention window with and without the first tokens kept (StreamingLLM's sink tokens).
"""
import re

import numpy as np

from analysis import figures
from analysis.results import attr_text, match_eps
from analysis.tables import Table


def ablation_text(tag):
    """The survey's ablation tag as a reader says it: window_256 -> "a window of the 256 most recent tokens",
    window_252_sinks_4 -> "the first 4 tokens + the 252 most recent"; other tags as they are."""
    m = re.fullmatch(r"window_(\d+)(?:_sinks_(\d+))?", tag)
    if not m:
        return tag
    w, s = m.groups()
    if s is None:
        return f"a window of the {w} most recent tokens"
    return f"the first {s} token{'s' if s != '1' else ''} + the {w} most recent"


def _ablation_base(label):
    """natural@T1024+window_256 -> natural@T1024 (the plain measurement at the same input and T)."""
    return label.split("+")[0]


def write_section(rep, data):
    """What the sink does (the survey's --ablations): per model, input and T, the next-token loss of every
    ablation beside full attention's (mean over domains, over the domains both have), the sink metric before
    and after for the massive-activation ones; the loss against the attention window, with and without the
    first tokens kept (StreamingLLM's sink tokens), one figure per model, input and T."""
    entries, ablation_losses, eps = data.entries, data.ablation_losses, data.eps
    ablated = [(a.model, a.input, a.domain, a.attrs, a.loss, None) for a in ablation_losses]
    ablated += [(e.model, e.input, e.domain, e.attrs, float(e.attrs["loss"]), e) for e in entries
                if "ablation" in e.attrs and "loss" in e.attrs]
    if not ablated:
        return
    rep.section("What the sink does: ablations", anchor="ablations")
    full = {(e.model, e.input, e.domain): e for e in entries if "ablation" not in e.attrs and "loss" in e.attrs}
    groups = {}  # (model, base label, ablation tag) -> [(domain, loss, entry, attributes)]
    for model, label, domain, attrs, loss, e in ablated:
        key = (model, _ablation_base(label), attr_text(attrs["ablation"]))
        groups.setdefault(key, []).append((domain, loss, e, attrs))
    rows, curves = [], {}  # curves: (model, base) -> {"full": loss, "window": {W: loss}, "sinks s": {W: loss}}
    for (model, base, tag), items in sorted(groups.items()):
        paired = [(d, loss, e, attrs) for d, loss, e, attrs in items if (model, base, d) in full]
        if not paired:
            rows.append([model, base, tag, len(items), float(np.mean([x[1] for x in items])), None, None, None, None])
            continue
        loss = float(np.mean([x[1] for x in paired]))
        loss_full = float(np.mean([float(full[(model, base, d)].attrs["loss"]) for d, *_ in paired]))
        sink_before = sink_after = None
        ents = [e for _, _, e, _ in paired if e is not None and match_eps(e.eps, eps) is not None]
        if ents:
            sink_after = float(np.mean([e.sink[match_eps(e.eps, eps)] for e in ents]))
            befores = [full[(model, base, d)] for d, _, e, _ in paired if e is not None]
            befores = [b for b in befores if len(b.sink) and match_eps(b.eps, eps) is not None]
            if befores:
                sink_before = float(np.mean([b.sink[match_eps(b.eps, eps)] for b in befores]))
        rows.append([model, base, tag, len(paired), loss, loss_full, loss - loss_full, sink_before, sink_after])
        attrs = paired[0][3]
        kind = attr_text(attrs.get("ablation_kind", ""))
        if kind in ("window", "window_sinks"):
            c = curves.setdefault((model, base), {"full": loss_full, "series": {}})
            s = int(attrs.get("sink_tokens", 0)) if kind == "window_sinks" else 0
            c["series"].setdefault(s, {})[int(attrs["window"])] = loss
    table = rep.table(Table("ablations", "Next-token loss (nats) under each ablation beside full attention, and Sink_1^"
                    f"{eps:g} (%) before and after the massive-activation ones (mean over the domains both have)",
                    ["model", "input", "ablation", "domains", "loss", "loss (full)", "change", f"Sink_1^{eps:g} before",
                     f"Sink_1^{eps:g} after"], rows,
                    {"loss": ".4f", "loss (full)": ".4f", "change": "+.4f", f"Sink_1^{eps:g} before": ".2f",
                     f"Sink_1^{eps:g} after": ".2f"}))
    anchors = {}
    for (model, base), c in sorted(curves.items()):
        series = [("window only" if s == 0 else f"window + first {s} token{'s' if s > 1 else ''}",
                   sorted(ws), [ws[w] for w in sorted(ws)], "o-") for s, ws in sorted(c["series"].items())]
        lone = all(len(x) == 1 for _, x, _, _ in series)
        anchors[(model, base)] = rep.figure(
            f"loss_vs_window_{model}_{base}", f"{model}, {base}: loss against the attention window",
            "Next-token loss with a window of the most recent tokens, with and without the first tokens kept "
            "(StreamingLLM's attention sinks); dashed: full attention." + (" One window per setting: points, not a "
            "sweep." if lone else ""), figures.xy_panels,
            [{"series": series, "xlabel": "window (most recent tokens)", "ylabel": "loss (nats)", "logx": 2,
              "hlines": [("full attention", c["full"])]}])
    # Findings: each model and input, every ablation's change of the loss.
    lengths = {(model, base): attr_text(items[0][3].get("T", "?")) for (model, base, _), items in groups.items()}
    by_base = {}
    for row in rows:
        by_base.setdefault((row[0], row[1]), []).append(row)
    for (model, base), rs in by_base.items():
        parts = [f"{ablation_text(r[2])} {r[6]:+.3f} nats ({r[5]:.3f} -> {r[4]:.3f})" if r[6] is not None else
                 f"{ablation_text(r[2])}: loss {r[4]:.3f} (no full-attention loss to compare)" for r in rs]
        rep.finding(f"{model} ({base}, T={lengths.get((model, base), '?')}), next-token loss against full "
                    "attention: " + "; ".join(parts) + ".",
                    anchors.get((model, base), table))
