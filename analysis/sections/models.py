"""Section 2, probed and surveyed models (/models/<model>/<input>/<domain>): Table 1 (left) layout (natural
= mean over domains, random, repeat) with every threshold and a bar chart, where each model's numbers
come from, the per-domain table, Sink_k per position (Table 10 right), the position-embedding
interventions (Table 7), Sink_1 against the sequence length (Fig. 3), then per model and input its
figures (analysis.sections.model_figures).
"""
import math
from pathlib import Path

import numpy as np

from analysis import figures
from analysis.results import attr_text, ini_settings, match_eps, tokens_at, tokens_text
from analysis.sections.labels import (attr_value, eps_col, first_token, measured_by, model_labels, ordered_inputs,
                                      set_text, sinklab_checkpoint, variant_text)
from analysis.sections.model_figures import map_figures, model_input_figures
from analysis.tables import Table, pivot, plain_float


def write_section(rep, data):
    """The tables over all models, then each model's figures per input (interventions and other lengths:
    tables only)."""
    entries, eps = data.entries, data.eps
    if not entries:
        rep.skipped("probed models", "no /models/<model>/<input>/<domain> group in the files")
        return
    rep.section("Probed and surveyed models", anchor="models")
    labels = model_labels(entries)
    for e in entries:
        rep.notes += e.notes
    skipped_pairs = {}  # the survey's map pairs a model does not have: one note per model
    for label, e in zip(labels, entries):
        if "skipped_pairs" in e.attrs:
            skipped_pairs.setdefault(label, attr_text(e.attrs["skipped_pairs"]))
    rep.notes += [f"{m}: requested (layer:head) map pairs not measured: {t}" for m, t in skipped_pairs.items()]
    models = list(dict.fromkeys(labels))
    inputs = ordered_inputs({e.input for e in entries})
    by = {}  # (model label, input) -> [entries]
    for label, e in zip(labels, entries):
        by.setdefault((label, e.input), []).append(e)

    # Table 1 (left): Sink_1^eps per model and input; natural (any input) = mean over its domains. Inputs
    # with an intervention ("natural+swap_5") have their own table, those at other lengths ("natural@T256")
    # the Sink-vs-T section.
    plain = [i for i in inputs if "+" not in i and "@T" not in i]
    missing = [e.label() for e in entries if len(e.sink) and match_eps(e.eps, eps) is None]
    rows, stars, means = [], set(), []
    for m in models:
        row, mrow = [m], []
        for inp in plain:
            es = [e for e in by.get((m, inp), []) if match_eps(e.eps, eps) is not None]
            v = float(np.mean([e.sink[match_eps(e.eps, eps)] for e in es])) if es else None
            row.append(v)
            mrow.append(np.nan if v is None else v)
            if es and any(e.proxy for e in es):
                stars.add((len(rows), len(row) - 1))
        rows.append(row)
        means.append(mrow)
    note = (f"natural (and every other input) = mean over its domains (per-domain table below); eps = {eps:g}; "
            "the other thresholds are in table1_all_eps.csv.")
    if missing:
        note += f" Without a Sink at eps={eps:g}, left out: {', '.join(missing)}."
    table1 = rep.table(Table("table1", f"Table 1 (left): Sink_1^{eps:g} (%) per model and input", ["model"] + plain,
                    rows, {i: ".2f" for i in plain}, stars, note=note))
    long_rows = []
    for m in models:
        for inp in inputs:
            es = by.get((m, inp), [])
            for e_val in sorted({x for e in es for x in e.eps if not math.isnan(x)}):
                vals = [e.sink[match_eps(e.eps, e_val)] for e in es if match_eps(e.eps, e_val) is not None]
                long_rows.append([m, inp, len(vals), e_val, float(np.mean(vals)),
                                  "yes" if any(e.proxy for e in es) else ""])
    rep.table(Table("table1_all_eps", "Sink_1^eps (%) per model, input and threshold (mean over domains)",
                    ["model", "input", "domains", "eps", "Sink_1", "proxy"], long_rows,
                    {"Sink_1": ".2f", "eps": "g"}, inline=False))
    bars = None
    if plain and not all(np.isnan(v) for r in means for v in r):
        bars = rep.figure("table1_bars", f"Sink_1^{eps:g} (%) per model and input", "Table 1 (left) as bars; "
                          "natural: the mean over its domains.", figures.grouped_bars, models, plain, means,
                          f"Sink_1^{eps:g} (%)")
    _model_findings(rep, models, plain, rows, stars, by, eps, bars or table1)

    _inputs_table(rep, models, inputs, by, data.runs)
    _per_domain_table(rep, labels, entries, eps)
    _sink_k_table(rep, labels, entries, eps)
    _intervention_table(rep, models, inputs, by, eps)
    _length_section(rep, models, inputs, by)
    for m in models:
        rep.heading(3, f"Model {m}")
        for inp in plain:
            es = by.get((m, inp))
            if es:
                model_input_figures(rep, m, inp, es)
                map_figures(rep, m, inp, es)


def _model_findings(rep, models, plain, rows, stars, by, eps, href):
    """A finding per model: its Sink_1^eps on each input of Table 1 (`rows`, `stars` as that table has them)."""
    for r, m in enumerate(models):
        cells = []
        for c, inp in enumerate(plain):
            v = rows[r][c + 1]
            if v is None:
                continue
            n = len({e.domain for e in by.get((m, inp), [])})
            where = {"natural": f"natural text ({n} domain{'s' if n > 1 else ''})", "random": "random tokens",
                     "repeat": "a repeated token"}.get(inp, inp)
            cells.append(f"{v:.2f} %{'*' if (r, c + 1) in stars else ''} on {where}")
        if cells:
            rep.finding(f"{m}: Sink_1^{eps:g} = " + ", ".join(cells) + ".", href)


def _base_input(label):
    """natural@T256 -> natural; other labels unchanged."""
    return label.split("@T")[0]


def _length_section(rep, models, inputs, by):
    """Sink_1^eps against T (paper Fig. 3) for every model and input measured at two or more lengths
    (the survey's --seq-lens): a table of every (model, input, T, eps) and one figure per model and input,
    one line per eps; each point the mean over domains."""
    rows = []
    for m in models:
        for base in dict.fromkeys(_base_input(i) for i in inputs if "+" not in i):
            by_T = {}  # T -> entries
            for inp in inputs:
                if _base_input(inp) != base or "+" in inp:
                    continue
                for e in by.get((m, inp), []):
                    if "T" in e.attrs and len(e.sink):
                        by_T.setdefault(int(e.attrs["T"]), []).append(e)
            if len(by_T) < 2:
                continue
            lengths = sorted(by_T)
            eps_all = sorted({x for es in by_T.values() for e in es for x in e.eps if not math.isnan(x)})
            series = []
            for e_val in eps_all:
                ys = []
                for T in lengths:
                    vals = [e.sink[match_eps(e.eps, e_val)] for e in by_T[T] if match_eps(e.eps, e_val) is not None]
                    ys.append(float(np.mean(vals)) if vals else np.nan)
                    if vals:
                        rows.append([m, base, T, e_val, ys[-1], len(vals)])
                series.append((f"eps = {e_val:g}", lengths, ys, "o-"))
            rep.figure(f"sink_vs_T_{m}_{base}", f"{m}, {base}: Sink_1^eps against T (Fig. 3)",
                       "Mean over domains, one line per threshold.", figures.xy_panels,
                       [{"series": series, "xlabel": "T (tokens)", "ylabel": "Sink_1^eps (%)", "logx": 2,
                         "ylim": (0, 100)}])
    if rows:
        rep.table(Table("sink_vs_T", "Sink_1^eps (%) against the sequence length T (Fig. 3)",
                        ["model", "input", "T", "eps", "Sink_1", "domains"], rows, {"Sink_1": ".2f", "eps": "g"}))


def own_model(e, runs):
    """(model_type, source, quantization) of an entry that measured one of sinklab's own checkpoints: the
    variant and size from its run's settings when the files hold that run (matched by the checkpoint's run
    directory, .../<out-dir>/checkpoints/step_<n>), the run, step and tokens; None for other models."""
    ckpt = sinklab_checkpoint(e)
    if ckpt is None:
        return None
    parts = Path(ckpt).parts
    run_dir = parts[-3] if len(parts) >= 3 and parts[-2] == "checkpoints" else Path(ckpt).name
    step = str(int(parts[-1][5:])) if parts and parts[-1].startswith("step_") and parts[-1][5:].isdigit() else "?"
    run = next((r for r in runs if Path(ini_settings(r.config).get("out-dir", "")).name == run_dir), None)
    n = attr_value(e.attrs, "n_params")
    size = f"{float(n) / 1e6:.3g} M parameters" if n is not None else ""
    if run is None:
        return "sinklab" + (f" ({size})" if size else ""), f"sinklab checkpoint {run_dir}, step {step}", "none"
    tokens = tokens_at(run, int(step)) if step.isdigit() else None
    kind = f"sinklab: {variant_text(ini_settings(run.config))}" + (f"; {size}" if size else "")
    return kind, f"run {run.name}, step {step} ({tokens_text(tokens)} tokens)", "none (float32 checkpoint)"


def _inputs_table(rep, models, inputs, by, runs):
    """Where each model's numbers come from (weights file and quantisation, when the survey copied the
    model directory's notes; for sinklab's own checkpoints the run's variant, size, step and tokens) and what
    they were measured on (first token: what the probe put first), with the next-token loss (mean over
    domains) where the survey measured one."""
    rows = []
    for m in models:
        for inp in inputs:
            es = by.get((m, inp), [])
            if not es:
                continue
            losses = [float(e.attrs["loss"]) for e in es if "loss" in e.attrs]
            n_seq = [int(e.attrs["n_seq"]) for e in es if "n_seq" in e.attrs]
            own = [own_model(e, runs) for e in es]
            if all(o is not None for o in own):
                kind, source, quant = (set_text(o[k] for o in own) for k in range(3))
            else:
                kind, source, quant = (set_text(attr_value(e.attrs, k) for e in es)
                                       for k in ("model_type", "source", "quantization"))
            rows.append([m, inp, set_text(measured_by(e) for e in es), len(es), sum(n_seq) if n_seq else None,
                         set_text(attr_value(e.attrs, "T") for e in es), set_text(first_token(e) for e in es),
                         float(np.mean(losses)) if len(losses) == len(es) else None, kind, source, quant])
    if rows:
        rep.table(Table("inputs", "Inputs, next-token loss and weights per model and input", [
            "model", "input", "measured by", "domains", "sequences", "T", "first token", "loss", "model_type",
            "source", "quantization"], rows, {"loss": ".4f"}, note="measured by: the program that wrote the file (its "
            "command_line attribute). first token: the token the probe put first in every sequence (a BOS or fixed "
            "token; none: the text as it comes). loss: mean next-token cross-entropy (nats per predicted token) over "
            "the domains; empty where the survey measured none (sinklab's own checkpoints). source / quantization: "
            "the weights file and its tensor types, from the model directory's sinklab_source.json (data_prep "
            "gguf-import); for sinklab's own checkpoints the run, step and training tokens, and its variant; '?' "
            "where the files do not say."))


def _per_domain_table(rep, labels, entries, eps):
    all_eps = sorted({x for e in entries for x in e.eps if not math.isnan(x)})
    any_star = any(e.get("sink_star") is not None for e in entries)
    cols = ["model", "input", "domain", "n_seq", "T", "first token"] + [eps_col("Sink_1", x) for x in all_eps]
    if any_star:
        cols += [eps_col("Sink_*", x) for x in all_eps]
    cols += ["loss", "massive ratio (last layer)", "proxy", "measured by", "file"]
    order = sorted(range(len(entries)), key=lambda k: (
        list(dict.fromkeys(labels)).index(labels[k]), ordered_inputs({e.input for e in entries}).index(
            entries[k].input), entries[k].domain))
    rows, stars = [], set()
    for k in order:
        e = entries[k]
        row = [labels[k], e.input, e.domain, attr_value(e.attrs, "n_seq"), attr_value(e.attrs, "T"), first_token(e)]
        for x in all_eps:
            i = match_eps(e.eps, x)
            row.append(None if i is None else plain_float(e.sink[i]))
            if e.proxy and i is not None:
                stars.add((len(rows), len(row) - 1))
        if any_star:
            ss = e.get("sink_star")
            for x in all_eps:
                i = match_eps(e.eps, x)
                row.append(None if ss is None or i is None or i >= len(ss) else plain_float(ss[i]))
        mr = e.get("massive_ratio")
        row += [plain_float(float(e.attrs["loss"])) if "loss" in e.attrs else None,
                None if mr is None or not len(mr) else plain_float(mr[-1]), "yes" if e.proxy else "", measured_by(e),
                Path(e.file).name]
        rows.append(row)
    fmts = {c: ".2f" for c in cols if c.startswith(("Sink", "massive"))}
    fmts["loss"] = ".4f"
    rep.table(Table("per_domain", "Sink_1^eps (%) per model, input and domain", cols, rows, fmts, stars))


def _sink_k_table(rep, labels, entries, eps):
    """Sink_k^eps for k = 1..K (Table 10 right) where the survey wrote sink_k[K,E] with K > 1."""
    rows = []
    for label, e in zip(labels, entries):
        sk = e.get("sink_k")
        i = match_eps(e.eps, eps)
        if sk is None or sk.shape[0] < 2 or i is None or sk.shape[1] != len(e.eps):
            continue
        for k in range(sk.shape[0]):
            rows.append([label, e.input, e.domain, k + 1, plain_float(sk[k, i])])
    if rows:  # on the page one row per model, input and domain, k across; the long form in the CSV
        long = Table("sink_k", f"Sink_k^{eps:g} (%) per token position k (1-based), one row per model, input, domain "
                     "and k", ["model", "input", "domain", "k", f"Sink_k^{eps:g}"], rows, {f"Sink_k^{eps:g}": ".2f"},
                     inline=False)
        rep.table(pivot(long, "sink_k_by_position", f"Sink_k^{eps:g} (%) per token position k (1-based; the long form "
                        "in sink_k.csv)", ["model", "input", "domain"], "k", f"Sink_k^{eps:g}", lambda k: f"k = {k}"))
        rep.table(long)


def _intervention_table(rep, models, inputs, by, eps):
    """Table 7 layout: the first position embedding replaced by / swapped with position t's; Sink_1 and
    Sink_t (mean over domains) where the survey wrote sink_t and the intervention attributes."""
    rows = []
    for m in models:
        for inp in inputs:
            es = [e for e in by.get((m, inp), []) if e.get("sink_t") is not None and "intervention" in e.attrs
                  and match_eps(e.eps, eps) is not None and len(e.get("sink_t")) == len(e.eps)]
            if not es:
                continue
            rows.append([m, inp, set_text(attr_value(e.attrs, "intervention") for e in es),
                         set_text(attr_value(e.attrs, "t") for e in es), len(es),
                         float(np.mean([e.sink[match_eps(e.eps, eps)] for e in es])),
                         float(np.mean([e.get("sink_t")[match_eps(e.eps, eps)] for e in es]))])
    if rows:
        rep.table(Table("interventions", f"Table 7 layout: position-embedding interventions, Sink^{eps:g} (%) "
                        "of the first token and of position t (mean over domains)",
                        ["model", "input", "intervention", "t", "domains", f"Sink_1^{eps:g}", f"Sink_t^{eps:g}"],
                        rows, {f"Sink_1^{eps:g}": ".2f", f"Sink_t^{eps:g}": ".2f"}))
