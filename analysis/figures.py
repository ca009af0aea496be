"""The report's figures (matplotlib, Agg backend: no display needed), one function per figure kind of
the paper. Each takes arrays and a caption line (model, input, domain, T, n_seq, notes) and writes one
PNG to `path`.
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


def _save(fig, path, caption):
    if caption:  # wrapped to the figure's width (about 15 characters of 8-point text per inch)
        fig.suptitle(textwrap.fill(caption, width=max(40, int(fig.get_figwidth() * 15))), fontsize=8)
    fig.tight_layout()
    # No Software/date metadata: the same results give the same bytes.
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    _pyplot().close(fig)
    return path


def run_curves(path, caption, train, ev, eps_idx):
    """Fig. 4 (middle): train/valid loss and Sink_1^eps over steps (+ grad norm when logged)."""
    panels = 2 + (train is not None and "grad_norm" in train)
    fig, axes = _pyplot().subplots(1, panels, figsize=(4.2 * panels, 3.4))
    ax = axes[0]
    if train is not None and "loss" in train and "step" in train:
        ax.plot(train["step"], train["loss"], lw=0.8, label="train loss")
    if ev is not None:
        ax.plot(ev.step, ev.valid_loss, "o-", ms=3, label="valid loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=7)
    ax = axes[1]
    if ev is not None:
        for i, e in enumerate(ev.eps):
            ax.plot(ev.step, ev.sink[:, i], "o-", ms=3, lw=1.6 if i == eps_idx else 0.8,
                    label=f"Sink_1^{e:g}")
        if ev.sink_star is not None:
            ax.plot(ev.step, ev.sink_star[:, eps_idx], "s--", ms=3, label=f"Sink_*^{ev.eps[eps_idx]:g}")
        ax.legend(fontsize=7)
    ax.set_xlabel("step")
    ax.set_ylabel("Sink (%)" + (" (proxy scores)" if ev is not None and ev.proxy else ""))
    if panels == 3:
        axes[2].plot(train["step"], train["grad_norm"], lw=0.8)
        axes[2].set_xlabel("step")
        axes[2].set_ylabel("grad norm")
    return _save(fig, path, caption)


def runs_compare(path, caption, series, eps):
    """Valid loss and Sink_1^eps over steps of several runs: series = [(name, EvalSeries, eps_idx)]."""
    fig, (a, b) = _pyplot().subplots(1, 2, figsize=(9, 3.4))
    for name, ev, i in series:
        a.plot(ev.step, ev.valid_loss, "o-", ms=3, label=name)
        b.plot(ev.step, ev.sink[:, i], "o-", ms=3, label=name + (" *" if ev.proxy else ""))
    a.set_xlabel("step")
    a.set_ylabel("valid loss")
    b.set_xlabel("step")
    b.set_ylabel(f"Sink_1^{eps:g} (%)")
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    return _save(fig, path, caption)


def alpha1_over_training(path, caption, series):
    """Mean alpha_1 over layers and heads against training steps, each run beside its uniform-attention
    baseline H_T / T (dotted): series = [(name, steps, mean_alpha1, baseline)]. A sink grows above the
    baseline long before a thresholded Sink_1 moves off 0%."""
    fig, ax = _pyplot().subplots(figsize=(5.6, 3.4))
    for name, steps, mean_alpha1, baseline in series:
        line, = ax.plot(steps, mean_alpha1, "o-", ms=3, label=f"{name}: mean alpha_1")
        ax.axhline(baseline, color=line.get_color(), ls=":", lw=1, label=f"{name}: uniform baseline {baseline:.3f}")
    ax.set_xlabel("step")
    ax.set_ylabel("mean alpha_1 over layers and heads")
    ax.legend(fontsize=7)
    return _save(fig, path, caption)


def per_layer(path, caption, curves, ylabel, logy=False):
    """Per-layer curves (Fig. 7: massive ratio; the long-input figure: last-token-to-first attention with
    error bars over heads): curves = [(label, x, y, style)] or [(label, x, y, style, yerr)], style a
    matplotlib format string."""
    fig, ax = _pyplot().subplots(figsize=(5.6, 3.4))
    for label, x, y, style, *yerr in curves:
        if yerr:
            ax.errorbar(x, y, yerr=yerr[0], fmt=style, ms=3, capsize=2, elinewidth=0.8, label=label)
        else:
            ax.plot(x, y, style, ms=3, label=label)
    ax.set_xlabel("layer")
    _integer_ticks(ax.xaxis)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.legend(fontsize=7)
    return _save(fig, path, caption)


def first_vs_rest_norms(path, caption, panels):
    """Fig. 2 (top) / Figs. 11-14: l2 norms of the first token vs the mean of the others per layer.
    panels = [(title, layers, first, rest)] (hidden states, keys, values)."""
    fig, axes = _pyplot().subplots(1, len(panels), figsize=(4 * len(panels), 3.2), squeeze=False)
    for ax, (title, layers, first, rest) in zip(axes[0], panels):
        ax.plot(layers, first, "o-", ms=3, label="first token")
        ax.plot(layers, rest, "s-", ms=3, label="mean of other tokens")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("layer")
        _integer_ticks(ax.xaxis)
        ax.set_ylabel("l2 norm")
        ax.legend(fontsize=7)
    return _save(fig, path, caption)


def head_layer_heatmap(path, caption, values, layer_labels, cbar_label, vmin=0.0, vmax=1.0):
    """Figs. 19-24: alpha_1 (or another [L,H] quantity) over layers (rows) and heads (columns)."""
    L, H = values.shape
    fig, ax = _pyplot().subplots(figsize=(min(max(5.0, 2.5 + 0.22 * H), 12), min(max(3.4, 1.6 + 0.22 * L), 10)))
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
    return _save(fig, path, caption)


def map_grid(path, caption, rows, col_titles):
    """Fig. 2 (bottom) / Figs. 15-18, 25-26: [T,T] maps over (query, key); rows = [(row title,
    [map per column])]. Entries above the diagonal (unseen keys) are blanked."""
    ncol = len(col_titles)
    fig, axes = _pyplot().subplots(len(rows), ncol, figsize=(3.6 * ncol, 3.1 * len(rows)), squeeze=False)
    for r, (title, maps) in enumerate(rows):
        for c, m in enumerate(maps):
            ax = axes[r][c]
            shown = np.where(np.tril(np.ones_like(m, dtype=bool)), m, np.nan)
            im = ax.imshow(shown, aspect="equal", cmap="viridis", interpolation="nearest")
            ax.set_title(f"{title}: {col_titles[c]}", fontsize=8)
            ax.set_xlabel("key position")
            ax.set_ylabel("query position")
            _integer_ticks(ax.xaxis)
            _integer_ticks(ax.yaxis)
            fig.colorbar(im, ax=ax, fraction=0.046)
    return _save(fig, path, caption)


def grouped_bars(path, caption, groups, series, values, ylabel):
    """Sink_1^eps per model (groups) and input (series): values[group][series], NaN = not measured."""
    fig, ax = _pyplot().subplots(figsize=(min(16, max(5, 1.0 + 0.35 * len(groups) * max(1, len(series)))), 3.6))
    width = 0.8 / max(1, len(series))
    x = np.arange(len(groups))
    for i, s in enumerate(series):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, [values[g][i] for g in range(len(groups))], width,
               label=s)
    ax.set_xticks(x)
    ax.set_xticklabels(groups, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7)
    return _save(fig, path, caption)


def sft_stability(path, caption, series):
    """Fig. 30: training loss and gradient norm over fine-tuning steps, one line per run, the monitor's
    events marked on both panels. series = [(label, step, loss, grad_norm, events)], events = [(step,
    kind name)]."""
    fig, axes = _pyplot().subplots(1, 2, figsize=(9, 3.4))
    markers = {"non-finite step": "x", "loss spike": "^", "grad-norm spike": "v"}
    for label, step, loss, grad_norm, events in series:
        for ax, y in zip(axes, (loss, grad_norm)):
            line, = ax.plot(step, y, lw=0.9, label=label)
            by_step = dict(zip(np.asarray(step).tolist(), np.asarray(y).tolist()))
            for kind, marker in markers.items():
                xs = [s for s, k in events if k == kind]
                if xs:  # at the curve's value (non-finite values at the plot's bottom)
                    ys = [by_step.get(s, np.nan) for s in xs]
                    low = np.nanmin(y[np.isfinite(y)]) if np.isfinite(y).any() else 0.0
                    ys = [v if np.isfinite(v) else low for v in ys]
                    ax.plot(xs, ys, marker, ms=7, color=line.get_color(), label=f"{label}: {kind}")
    for ax, name in zip(axes, ("training loss", "gradient norm")):
        ax.set_xlabel("fine-tuning step")
        ax.set_ylabel(name)
        _integer_ticks(ax.xaxis)
        ax.legend(fontsize=7)
    return _save(fig, path, caption)


def xy_panels(path, caption, panels, ncols=None):
    """Panels of lines/points side by side (Figs. 3, 4 left, 5, 6, 9, 10, 28; the loss against the attention
    window): each panel a dict with title, xlabel, ylabel, series = [(label, x, y, style)], and optionally
    logx (True: log10; 2: log2 with ticks at the values the series take, written as plain numbers),
    xticks = [labels] (x is then 0..n-1), annotate = [(text, x, y)], hlines = [(label, y)] (dashed
    references across the panel, e.g. full attention), ylim."""
    n = len(panels)
    ncols = ncols or n
    nrows = (n + ncols - 1) // ncols
    fig, axes = _pyplot().subplots(nrows, ncols, figsize=(4.2 * ncols, 3.3 * nrows), squeeze=False)
    for k, p in enumerate(panels):
        ax = axes[k // ncols][k % ncols]
        for label, x, y, style in p["series"]:
            ax.plot(x, y, style, ms=4, label=label)
        for label, y in p.get("hlines", ()):
            ax.axhline(y, ls="--", lw=0.9, color="gray", label=label)
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
        if any(s[0] for s in p["series"]) or p.get("hlines"):
            ax.legend(fontsize=7)
    for k in range(n, nrows * ncols):
        axes[k // ncols][k % ncols].axis("off")
    return _save(fig, path, caption)
