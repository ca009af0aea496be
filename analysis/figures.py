"""The report's figures (matplotlib, Agg backend: no display needed), one function per figure kind of
the paper. Each takes a short title and arrays and writes one PNG to `path`; the detail (model, input,
domain, T, n_seq, notes) is the page's caption under the figure, not part of the image. Legends sit
outside the axes (one per figure, right of the panels), reference lines are drawn once, and a series of
one point is drawn as a labelled point.
"""
import textwrap

import numpy as np

DPI = 110


def _pyplot():
    """matplotlib.pyplot on the Agg backend, imported at the first figure: the import takes about a
    second, which a run that stops at a bad input file should not pay."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _integer_ticks(axis):
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _figure(nrows=1, ncols=1, figsize=(5.6, 3.4), **kwargs):
    """A figure with constrained layout (room for a legend outside the axes)."""
    return _pyplot().subplots(nrows, ncols, figsize=figsize, layout="constrained", **kwargs)


def _legend(fig, axes):
    """One legend for the figure, right of the panels (outside the data): the labelled artists of every
    axis, each label once."""
    seen = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label and not label.startswith("_"):
                seen.setdefault(label, handle)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside right center", fontsize=7, frameon=False)


def _save(fig, path, title):
    if title:  # a short title; wrapped should it still be long
        fig.suptitle(textwrap.fill(title, width=max(40, int(fig.get_figwidth() * 13))), fontsize=9)
    # No Software/date metadata: the same results give the same bytes.
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    _pyplot().close(fig)
    return path


def _plot_series(ax, label, x, y, style, **kwargs):
    """A line, or for a single point a marker labelled with its name beside it (not a line of one point)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) == 1:
        marker = "".join(c for c in style if c not in "-:.") or "o"
        line, = ax.plot(x, y, marker, ms=6, label=label, **kwargs)
        if label and np.isfinite(y[0]):
            ax.annotate(label.lstrip("_"), (x[0], y[0]), textcoords="offset points", xytext=(5, 4), fontsize=7,
                        color=line.get_color())
        return line
    line, = ax.plot(x, y, style, ms=3, label=label, **kwargs)
    return line


def _reference(ax, y, label, drawn, **kwargs):
    """A horizontal reference line, drawn once per value (`drawn`: the set of values drawn on this axis)."""
    key = round(float(y), 9)
    if key in drawn:
        return
    drawn.add(key)
    ax.axhline(y, ls=kwargs.pop("ls", ":"), lw=kwargs.pop("lw", 1), color=kwargs.pop("color", "gray"), label=label,
               **kwargs)


def run_curves(path, title, train, ev, eps_idx):
    """Fig. 4 (middle): train/valid loss and Sink_1^eps over steps (+ grad norm when logged)."""
    panels = 2 + (train is not None and "grad_norm" in train)
    fig, axes = _figure(1, panels, figsize=(3.6 * panels + 1.4, 3.2))
    ax = axes[0]
    if train is not None and "loss" in train and "step" in train:
        ax.plot(train["step"], train["loss"], lw=0.8, label="train loss")
    if ev is not None:
        _plot_series(ax, "valid loss", ev.step, ev.valid_loss, "o-")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax = axes[1]
    if ev is not None:
        for i, e in enumerate(ev.eps):
            _plot_series(ax, f"Sink_1^{e:g}", ev.step, ev.sink[:, i], "o-", lw=1.6 if i == eps_idx else 0.8)
        if ev.sink_star is not None:
            _plot_series(ax, f"Sink_*^{ev.eps[eps_idx]:g}", ev.step, ev.sink_star[:, eps_idx], "s--")
    ax.set_xlabel("step")
    ax.set_ylabel("Sink (%)" + (" (proxy scores*)" if ev is not None and ev.proxy else ""))
    if panels == 3:
        axes[2].plot(train["step"], train["grad_norm"], lw=0.8)
        axes[2].set_xlabel("step")
        axes[2].set_ylabel("grad norm")
    _legend(fig, axes)
    return _save(fig, path, title)


def runs_compare(path, title, series, eps, xlabel="step"):
    """Valid loss and Sink_1^eps over steps of several runs: series = [(name, EvalSeries, eps_idx)]."""
    fig, (a, b) = _figure(1, 2, figsize=(9.5, 3.4))
    for name, ev, i in series:
        line = _plot_series(a, name + (" *" if ev.proxy else ""), ev.step, ev.valid_loss, "o-")
        _plot_series(b, "_" + name, ev.step, ev.sink[:, i], "o-", color=line.get_color())
    for ax, label in ((a, "valid loss"), (b, f"Sink_1^{eps:g} (%)")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
    _legend(fig, (a, b))
    return _save(fig, path, title)


def alpha1_over_training(path, title, series):
    """Mean alpha_1 over layers and heads against training steps, with the uniform-attention baseline H_T / T
    drawn once per value (dotted): series = [(name, steps, mean_alpha1, baseline)]. A sink grows above
    the baseline long before a thresholded Sink_1 moves off 0%."""
    fig, ax = _figure(figsize=(6.4, 3.4))
    drawn = set()
    baselines = sorted({round(float(b), 9) for *_, b in series})
    for name, steps, mean_alpha1, baseline in series:
        _plot_series(ax, name, steps, mean_alpha1, "o-")
    for b in baselines:
        _reference(ax, b, f"uniform attention (H_T / T): {b:.3f}", drawn)
    ax.set_xlabel("step")
    ax.set_ylabel("mean alpha_1 over layers and heads")
    _legend(fig, [ax])
    return _save(fig, path, title)


def per_layer(path, title, curves, ylabel, logy=False):
    """Per-layer curves (Fig. 7: massive ratio; the long-input figure: last-token-to-first attention with
    error bars over heads): curves = [(label, x, y, style)] or [(label, x, y, style, yerr)], style a
    matplotlib format string."""
    fig, ax = _figure(figsize=(6.4, 3.4))
    for label, x, y, style, *yerr in curves:
        if yerr:
            ax.errorbar(x, y, yerr=yerr[0], fmt=style, ms=3, capsize=2, elinewidth=0.8, label=label)
        else:
            _plot_series(ax, label, x, y, style)
    ax.set_xlabel("layer")
    _integer_ticks(ax.xaxis)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    _legend(fig, [ax])
    return _save(fig, path, title)


def first_vs_rest_norms(path, title, panels):
    """Fig. 2 (top) / Figs. 11-14: l2 norms of the first token vs the mean of the others per layer.
    panels = [(title, layers, first, rest)] (hidden states, keys, values)."""
    fig, axes = _figure(1, len(panels), figsize=(3.6 * len(panels) + 1.6, 3.2), squeeze=False)
    for ax, (panel, layers, first, rest) in zip(axes[0], panels):
        _plot_series(ax, "first token", layers, first, "o-")
        _plot_series(ax, "mean of the other tokens", layers, rest, "s-")
        ax.set_title(panel, fontsize=9)
        ax.set_xlabel("layer")
        _integer_ticks(ax.xaxis)
        ax.set_ylabel("l2 norm")
    _legend(fig, axes[0])
    return _save(fig, path, title)


def head_layer_heatmap(path, title, values, layer_labels, cbar_label, vmin=0.0, vmax=1.0):
    """Figs. 19-24: alpha_1 (or another [L,H] quantity) over layers (rows) and heads (columns)."""
    L, H = values.shape
    fig, ax = _figure(figsize=(min(max(5.0, 2.5 + 0.22 * H), 12), min(max(3.4, 1.6 + 0.22 * L), 10)))
    im = ax.imshow(values, aspect="auto", origin="lower", vmin=vmin, vmax=vmax, cmap="viridis",
                   interpolation="nearest")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    step = max(1, L // 16)
    ax.set_yticks(range(0, L, step))
    ax.set_yticklabels([str(layer_labels[i]) for i in range(0, L, step)], fontsize=7)
    hstep = max(1, H // 16)
    ax.set_xticks(range(0, H, hstep))
    ax.tick_params(axis="x", labelsize=7)
    fig.colorbar(im, ax=ax, label=cbar_label)
    return _save(fig, path, title)


def map_grid(path, title, rows, col_titles):
    """Fig. 2 (bottom) / Figs. 15-18, 25-26: [T,T] maps over (query, key); rows = [(row title,
    [map per column])]. Entries above the diagonal (unseen keys) are blanked."""
    ncol = len(col_titles)
    fig, axes = _figure(len(rows), ncol, figsize=(3.6 * ncol, 3.1 * len(rows)), squeeze=False)
    for r, (row_title, maps) in enumerate(rows):
        for c, m in enumerate(maps):
            ax = axes[r][c]
            shown = np.where(np.tril(np.ones_like(m, dtype=bool)), m, np.nan)
            im = ax.imshow(shown, aspect="equal", cmap="viridis", interpolation="nearest")
            ax.set_title(f"{row_title}: {col_titles[c]}", fontsize=8)
            ax.set_xlabel("key position")
            ax.set_ylabel("query position")
            _integer_ticks(ax.xaxis)
            _integer_ticks(ax.yaxis)
            fig.colorbar(im, ax=ax, fraction=0.046)
    return _save(fig, path, title)


def grouped_bars(path, title, groups, series, values, ylabel):
    """Sink_1^eps per model (groups) and input (series): values[group][series], NaN = not measured."""
    fig, ax = _figure(figsize=(min(14, max(5.5, 2.0 + 0.35 * len(groups) * max(1, len(series)))), 3.6))
    width = 0.8 / max(1, len(series))
    x = np.arange(len(groups))
    for i, s in enumerate(series):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, [values[g][i] for g in range(len(groups))], width,
               label=s)
    ax.set_xticks(x)
    ax.set_xticklabels(groups, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 100)
    _legend(fig, [ax])
    return _save(fig, path, title)


def sft_stability(path, title, series):
    """Fig. 30: training loss and gradient norm over fine-tuning steps, one line per run, the monitor's
    events marked on both panels. series = [(label, step, loss, grad_norm, events)], events = [(step,
    kind name)]."""
    fig, axes = _figure(1, 2, figsize=(9.5, 3.4))
    markers = {"non-finite step": "x", "loss spike": "^", "grad-norm spike": "v"}
    for label, step, loss, grad_norm, events in series:
        for k, (ax, y) in enumerate(zip(axes, (loss, grad_norm))):
            line, = ax.plot(step, y, lw=0.9, label=label if k == 0 else "_" + label)
            by_step = dict(zip(np.asarray(step).tolist(), np.asarray(y).tolist()))
            for kind, marker in markers.items():
                xs = [s for s, k2 in events if k2 == kind]
                if xs:  # at the curve's value (non-finite values at the plot's bottom)
                    ys = [by_step.get(s, np.nan) for s in xs]
                    low = np.nanmin(y[np.isfinite(y)]) if np.isfinite(y).any() else 0.0
                    ys = [v if np.isfinite(v) else low for v in ys]
                    ax.plot(xs, ys, marker, ms=7, color=line.get_color(), label=f"{label}: {kind}")
    for ax, name in zip(axes, ("training loss", "gradient norm")):
        ax.set_xlabel("fine-tuning step")
        ax.set_ylabel(name)
        _integer_ticks(ax.xaxis)
    _legend(fig, axes)
    return _save(fig, path, title)


def xy_panels(path, title, panels, ncols=None):
    """Panels of lines/points side by side (Figs. 3, 4 left, 5, 6, 9, 10, 28; the loss against the attention
    window): each panel a dict with title, xlabel, ylabel, series = [(label, x, y, style)] (a series of one
    point is drawn as a point labelled with its name), and optionally logx (True: log10; 2: log2 with ticks at
    the values the series take, written as plain numbers), xticks = [labels] (x is then 0..n-1), annotate =
    [(text, x, y)], hlines = [(label, y)] (dashed references across the panel, e.g. full attention), ylim.
    One legend for the figure, right of the panels."""
    n = len(panels)
    ncols = ncols or n
    nrows = (n + ncols - 1) // ncols
    fig, axes = _figure(nrows, ncols, figsize=(3.8 * ncols + 1.8, 3.1 * nrows), squeeze=False)
    for k, p in enumerate(panels):
        ax = axes[k // ncols][k % ncols]
        for label, x, y, style in p["series"]:
            _plot_series(ax, label, x, y, style)
        drawn = set()
        for label, y in p.get("hlines", ()):
            _reference(ax, y, label, drawn, ls="--", lw=0.9)
        for text, x, y in p.get("annotate", ()):
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(3, 3), fontsize=6)
        if p.get("logx") == 2:
            from matplotlib.ticker import NullFormatter

            ax.set_xscale("log", base=2)
            ticks = sorted({float(v) for s in p["series"] for v in s[1]})
            ax.set_xticks(ticks)
            ax.set_xticklabels([f"{v:g}" for v in ticks])
            ax.xaxis.set_minor_formatter(NullFormatter())
        elif p.get("logx"):
            ax.set_xscale("log")
        if p.get("xticks") is not None:
            ax.set_xticks(range(len(p["xticks"])))
            ax.set_xticklabels(p["xticks"], rotation=40, ha="right", fontsize=7)
        if p.get("ylim") is not None:
            ax.set_ylim(*p["ylim"])
        ax.set_title(p.get("title", ""), fontsize=9)
        ax.set_xlabel(p.get("xlabel", ""))
        ax.set_ylabel(p.get("ylabel", ""))
    for k in range(n, nrows * ncols):
        axes[k // ncols][k % ncols].axis("off")
    _legend(fig, [ax for row in axes for ax in row])
    return _save(fig, path, title)


def label_colours(labels):
    """{label: colour} in the order of `labels` (tab10, tab20 beyond ten): a section that draws the same runs in
    several figures passes one such map to each, so a run keeps its colour from figure to figure."""
    cmap = _pyplot().get_cmap("tab10" if len(labels) <= 10 else "tab20")
    return {lab: cmap(i % cmap.N) for i, lab in enumerate(dict.fromkeys(labels))}


def run_panels(path, title, panels, xlabel="step", colours=None):
    """Several runs over training, one line per run in the same colour on every panel, one legend:
    panels = [dict(ylabel, series = [(run label, x, y)], logy, hlines = [(label, y)], dashed = [(run label,
    x, y)] (a second quantity of the same run, dashed: raw weights on the other keys beside those on BOS))].
    Runs keep their colour across panels, and across figures given the same `colours` (label_colours)."""
    labels = list(dict.fromkeys(lab for p in panels for lab, *_ in p["series"] + p.get("dashed", [])))
    colour = colours if colours is not None and all(lab in colours for lab in labels) else label_colours(labels)
    fig, axes = _figure(1, len(panels), figsize=(3.7 * len(panels) + 2.2, 3.4), squeeze=False)
    for ax, p in zip(axes[0], panels):
        for lab, x, y in p["series"]:
            _plot_series(ax, lab, x, y, "o-", color=colour[lab])
        for lab, x, y in p.get("dashed", ()):
            _plot_series(ax, "_" + lab, x, y, "s--", color=colour[lab], alpha=0.8)
        if p.get("dashed"):
            ax.plot([], [], "k-", label=p.get("solid_label", "solid"))
            ax.plot([], [], "k--", label=p.get("dashed_label", "dashed"))
        drawn = set()
        for label, y in p.get("hlines", ()):
            _reference(ax, y, label, drawn, ls=":", lw=1.2, color="black")
        if p.get("logy"):
            from matplotlib.ticker import FuncFormatter

            ax.set_yscale("log")
            plain = FuncFormatter(lambda v, _: f"{v:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain)
            ax.tick_params(axis="y", which="minor", labelsize=6)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(p["ylabel"], fontsize=8)
        ax.set_title(p.get("title", ""), fontsize=9)
    _legend(fig, axes[0])
    return _save(fig, path, title)


def band_panels(path, title, panels, xlabel="tokens seen"):
    """Means over seeds with their intervals as shaded bands, one line per group in the same colour and line
    style on every panel, one legend: panels = [dict(ylabel, series = [(label, x, mean, low, high, linestyle)],
    hlines = [(label, y)], title, logx (default True), ylim)]. A band is drawn where both ends are finite."""
    colour = label_colours([s[0] for p in panels for s in p["series"]])
    fig, axes = _figure(1, len(panels), figsize=(4.2 * len(panels) + 2.6, 3.6), squeeze=False)
    for ax, p in zip(axes[0], panels):
        for lab, x, y, lo, hi, ls in p["series"]:
            x, lo, hi = (np.asarray(v, dtype=float) for v in (x, lo, hi))
            _plot_series(ax, lab, x, y, "o" + ls, color=colour[lab])
            ok = np.isfinite(lo) & np.isfinite(hi)
            if ok.any():
                ax.fill_between(x[ok], lo[ok], hi[ok], color=colour[lab], alpha=0.15, lw=0)
        drawn = set()
        for label, y in p.get("hlines", ()):
            _reference(ax, y, label, drawn, ls=":", lw=1.2, color="black")
        if p.get("logx", True):
            from matplotlib.ticker import NullFormatter

            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())  # the decades only: minor labels overlap
        if p.get("ylim") is not None:
            ax.set_ylim(*p["ylim"])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(p["ylabel"], fontsize=8)
        ax.set_title(p.get("title", ""), fontsize=9)
    _legend(fig, axes[0])
    return _save(fig, path, title)


VERDICT_COLOURS = {"agrees": "#2a9d3a", "disagrees": "#c0392b", "inconclusive": "#7f7f7f", "disputed": "#b8860b",
                   "no expectation": "#1f4e9c"}


def forest(path, title, rows, xlabel="emergence step", fraction_label="sink fraction"):
    """A forest plot, one row per cell (top to bottom): on the left its median emergence step with the 95 %
    interval and each seed's step (grey dots), on the right the fraction of seeds with a sink with its interval
    (dotted: 0.5). rows = [dict(label, median, lo, hi, censor, seeds = [(step, censored)], fraction, frac_lo,
    frac_hi, verdict, marker and what (optional: the median's marker, default "D", and its legend's words, e.g.
    one of each per measure))]; +inf (a censored
    median or interval end) is drawn at `censor` (MeasureStats.censor_step: the earliest last step of the row's
    censored runs, or its latest observed emergence if later) as a right-pointing arrow, "> censor"; the median's
    colour is its verdict."""
    finite = [v for r in rows for v in (r["median"], r["lo"], r["hi"], r["censor"]) + tuple(s for s, _ in r["seeds"])
              if v is not None and np.isfinite(v)]
    right = (max(finite) if finite else 1.0) * 1.12 + 1
    fig, (ax, fx) = _figure(1, 2, figsize=(11, 1.3 + 0.32 * len(rows)), sharey=True,
                            gridspec_kw={"width_ratios": [3, 1.4]})
    for i, r in enumerate(rows):
        y = -i
        colour = VERDICT_COLOURS.get(r["verdict"], "black")
        done = [s for s, censored in r["seeds"] if not censored]
        cut = [s for s, censored in r["seeds"] if censored]
        ax.plot(done, [y + 0.18] * len(done), "o", ms=3, color="#999999", label="a seed's emergence step")
        ax.plot(cut, [y + 0.18] * len(cut), ">", ms=4, mfc="none", color="#999999",
                label="a seed without a sink (at its last step)")
        lo, hi = r["lo"], r["hi"]
        if lo is not None and np.isfinite(lo):
            end = hi if np.isfinite(hi) else r["censor"]
            ax.plot([lo, end], [y, y], "-", lw=1.6, color=colour)
            if not np.isfinite(hi):  # the interval's high end is censored: an arrow past the last step
                ax.annotate("", xy=(right, y), xytext=(end, y),
                            arrowprops=dict(arrowstyle="->", color=colour, lw=1.2, ls="--"))
        if np.isfinite(r["median"]):
            ax.plot([r["median"]], [y], r.get("marker", "D"), ms=6, color=colour,
                    label=f"median{r.get('what', '')}: {r['verdict']}")
        else:
            ax.plot([r["censor"]], [y], ">", ms=8, mfc="none", mew=1.6, color=colour,
                    label=f"median censored (> last step): {r['verdict']}")
        below, above = max(0.0, r["fraction"] - r["frac_lo"]), max(0.0, r["frac_hi"] - r["fraction"])
        fx.errorbar([r["fraction"]], [y], xerr=[[below], [above]], fmt="s", ms=5, color=colour, capsize=2,
                    elinewidth=1.2)
    ax.set_yticks([-i for i in range(len(rows))])
    ax.set_yticklabels([r["label"] for r in rows], fontsize=7)
    ax.set_ylim(-len(rows) + 0.4, 0.7)
    ax.set_xlim(0, right * 1.02)
    ax.set_xlabel(xlabel)
    fx.axvline(0.5, ls=":", color="black", lw=1)
    fx.set_xlim(-0.03, 1.03)
    fx.set_xlabel(fraction_label, fontsize=8)
    for a in (ax, fx):
        a.grid(axis="x", color="#e5e5e5", lw=0.6)
    _legend(fig, [ax])
    return _save(fig, path, title)
