"""The figures of one probed model and input, the mean over its domains: l2 norms of the first token vs
the rest (Figs. 2, 11-14), the alpha_1 heatmap (Figs. 19-24), the massive-activation ratio per layer
(Fig. 7), the last token's attention to the first (Fig. 12) and the QK cosine / norm-product and
attention maps (Figs. 2, 15-18, 25-26). Each one missing from the files is listed as skipped.
"""
import numpy as np

from analysis import figures
from analysis.sections.labels import entry_caption


def _mean_of(entries, name):
    """Mean over entries (domains) of dataset `name`; None if any lacks it or shapes differ."""
    arrays = [e.get(name) for e in entries]
    if any(a is None for a in arrays) or len({a.shape for a in arrays}) != 1:
        return None
    return np.mean(arrays, axis=0)


def model_input_figures(rep, model, inp, es):
    """The per-layer figures of one model and input (entries `es`, one per domain): l2 norms, alpha_1
    heatmap, massive-activation ratio, last-token-to-first attention."""
    domains = [e.domain for e in es]
    domain_text = domains[0] if len(es) == 1 else f"mean of {len(es)} ({', '.join(domains)})"
    caption = entry_caption(es, domain_text) + "."
    where = f"{model} / {inp}"
    name = f"{model}_{inp}"
    short = f"{model}, {inp}"
    La_layers = None
    al = es[0].get("attention_layers")
    if al is not None and all(e.get("attention_layers") is not None and
                              np.array_equal(e.get("attention_layers"), al) for e in es):
        La_layers = [int(x) for x in al]

    def layer_axis(n):
        return La_layers if La_layers is not None and len(La_layers) == n else list(range(n))

    # l2 norms of the first token vs the rest: hidden states over all layers, keys/values over attention layers.
    panels = []
    for what, prefix in (("hidden states h", "hnorm"), ("keys k", "knorm"), ("values v", "vnorm")):
        first, rest = _mean_of(es, f"{prefix}_first"), _mean_of(es, f"{prefix}_rest")
        if first is not None and rest is not None and first.shape == rest.shape:
            x = list(range(len(first))) if prefix == "hnorm" else layer_axis(len(first))
            panels.append((what, x, first, rest))
    if panels:
        rep.figure(f"{name}_norms", f"{short}: l2 norms, first token against the others",
                   "Mean of the other tokens per layer (Figs. 2, 11-14). " + caption, figures.first_vs_rest_norms,
                   panels)
    else:
        rep.skipped(where, "no hnorm_/knorm_/vnorm_first and _rest datasets (l2 norms of h/k/v)")

    alphas = [e.alpha1() for e in es]
    if all(x is not None for x in alphas) and len({x.shape for x in alphas}) == 1:
        a = np.mean(alphas, axis=0)
        rep.figure(f"{name}_alpha1", f"{short}: alpha_1 per layer and head", "Figs. 19-24. " + caption,
                   figures.head_layer_heatmap, a, layer_axis(a.shape[0]), "alpha_1")
    else:
        rep.skipped(where, "no alpha[L,H,K] dataset, or shapes differ between domains (alpha_1 heatmap)")

    curves = []
    mr = _mean_of(es, "massive_ratio")
    if mr is not None:
        curves.append(("block output h", np.arange(len(mr)), mr, "o-"))
    mp = _mean_of(es, "massive_ratio_pre_norm")
    if mp is not None:
        curves.append(("before the block's last norm", np.arange(len(mp)), mp, "s--"))
    if curves:
        rep.figure(f"{name}_massive_ratio", f"{short}: massive-activation ratio per layer",
                   "||h_1|| / mean ||h_t>1|| per layer (Fig. 7). " + caption, figures.per_layer, curves,
                   "massive-activation ratio")
    else:
        rep.skipped(where, "no massive_ratio dataset (massive-activation ratio per layer)")

    ltf = _mean_of(es, "last_to_first")
    if ltf is not None:
        # The paper's long-input figure (App. F, Fig. 12): the mean over heads, error bars = std over heads.
        x = layer_axis(ltf.shape[0])
        curves = [("mean over heads (bars: std over heads)", x, ltf.mean(axis=1), "o", ltf.std(axis=1)),
                  ("max over heads", x, ltf.max(axis=1), "^--"), ("min over heads", x, ltf.min(axis=1), "v--")]
        rep.figure(f"{name}_last_to_first", f"{short}: last token's attention to the first",
                   "Per layer; long inputs: App. F, Fig. 12. " + caption, figures.per_layer, curves, "A[T-1, 0]")
    else:
        rep.skipped(where, "no last_to_first dataset (the last token's attention to the first)")


def map_figures(rep, model, inp, es):
    """QK cosine / norm-product maps and attention maps of one model and input: the mean over the domains
    whose maps have the same shape and (layer, head) pairs, one figure per kind and such group."""
    _map_kind(rep, model, inp, es, ("qk_cos", "qk_normprod"), "qk", "QK angles and norms",
              "cos(q_t, k_j) and ||q_t|| ||k_j|| (Figs. 2, 15-18).", ["cos(q_t, k_j)", "||q_t|| ||k_j||"])
    _map_kind(rep, model, inp, es, ("attention_maps",), "attention", "attention maps",
              "Attention maps A[t, j] (Figs. 25-26).", ["A[t, j]"])


def _map_kind(rep, model, inp, es, names, suffix, title, what, col_titles):
    groups = {}  # (shape, pairs) -> [(entry, [stack per name])]
    for e in es:
        stacks = [e.map_stack(n) for n in names]
        if all(m is None for m in stacks):
            continue
        if any(m is None for m in stacks) or len({m.shape for m in stacks}) != 1:
            rep.skipped(e.label(), f"{' and '.join(names)} maps of different shapes (they need one [P,T,T])")
            continue
        pairs = e.map_pairs(names[0], stacks[0].shape[0])
        key = (stacks[0].shape, tuple(pairs) if pairs else None)
        groups.setdefault(key, []).append((e, stacks))
    for (shape, pairs), members in groups.items():
        ents = [e for e, _ in members]
        means = [np.mean([st[i] for _, st in members], axis=0) for i in range(len(names))]
        domain_text = ents[0].domain if len(ents) == 1 else \
            f"mean of {len(ents)} ({', '.join(e.domain for e in ents)})"
        rows = [(_pair_title(pairs, p), [m[p] for m in means]) for p in range(shape[0])]
        name = f"{model}_{inp}_{suffix}" if len(groups) == 1 else f"{model}_{inp}_{ents[0].domain}_{suffix}"
        rep.figure(name, f"{model}, {inp}: {title}", what + " " + entry_caption(ents, domain_text) +
                   ("" if pairs else ". (layer, head) pairs not stored") + ".", figures.map_grid, rows, col_titles)


def _pair_title(pairs, p):
    return f"layer {pairs[p][0]} head {pairs[p][1]}" if pairs else f"map {p}"
