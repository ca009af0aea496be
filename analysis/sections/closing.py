"""The end of the page, "What was read, and notes": the files (with their provenance attributes), runs
and models read, what the numbers mean (GLOSSARY), the proxy-score statement, the notes of the files
and sections, and what was skipped, one line per reason. Paths are shown without the machine's
directories (tables.public_text).
"""
import html
from pathlib import Path

from analysis.sections.labels import measured_by, model_labels, ordered_inputs, run_labels, set_text
from analysis.tables import public_text


def _esc(text):
    return html.escape(public_text(text))


def skipped_lines(skips):
    """The skipped parts, one line per reason: "why: what, what, ..." in the order they first came."""
    by_why = {}
    for what, why in skips:
        by_why.setdefault(why, [])
        if what not in by_why[why]:
            by_why[why].append(what)
    return [f"{why[:1].upper()}{why[1:]}: {', '.join(whats)}." for why, whats in by_why.items()]


GLOSSARY = [
    ("alpha_k", "importance score of position k in one head: the mean attention that queries i >= k give to "
                "key k, alpha_k = 1/(T-k+1) sum_{i>=k} A[i,k]; alpha_1 is the first token's."),
    ("Sink_k^eps", "percentage of (layer, head) pairs with alpha_k > eps, averaged over the probe sequences "
                   "(paper Sec. 3.2), in %."),
    ("Sink_*^eps", "the same for the bias position (learnable sink token x* or key bias k*; Tables 4-5)."),
    ("valid loss", "mean cross-entropy (nats per token) on the validation shard at that step."),
    ("loss (surveyed models)", "mean next-token cross-entropy (nats per predicted token) over the T-1 predicted "
                               "positions of the sequences the survey measured."),
    ("massive-activation ratio", "||h_1|| / mean_{t>1} ||h_t|| of each block's output hidden states (Fig. 7; "
                                 "the survey takes post-norm blocks and the last block before their norm); "
                                 "'before norm': a post-norm model's residual sum before the block's last "
                                 "norm."),
    ("Sink_t (interventions)", "Sink_t^eps at the position t whose embedding replaced or was swapped with the "
                               "first one (Table 7)."),
    ("hnorm/knorm/vnorm", "l2 norms of the first token's hidden state / key / value vs the mean over the "
                          "other tokens, per layer (Figs. 2, 11-14)."),
    ("last-to-first", "attention of the last query to the first key, A[T-1, 0], per layer and head."),
    ("natural", "Table 1's natural-language column: the mean of Sink_1^eps over the domains probed."),
    ("layers, heads", "0-based indices, as the files store them."),
]


def closing_html(rep, data):
    """The end of the page: what was read (files, runs, models), what the numbers mean, notes, skips."""
    files, runs, entries, items, eps = data.files, data.runs, data.entries, data.items, data.eps
    out = ['<h2 id="summary">What was read, and notes</h2>', "<h3>Files</h3>", "<ul>"]
    for rf in files:
        meta = ", ".join(f"{k}={rf.attrs[k]}" for k in ("sinklab_version", "git_sha", "created_utc")
                         if rf.attrs.get(k))
        cmd = rf.attrs.get("command_line", "")
        out.append(f"<li><code>{_esc(rf.path)}</code>" + (f" ({_esc(meta)})" if meta else "")
                   + (f"<br><code>{_esc(cmd)}</code>" if cmd else "") + "</li>")
    out.append("</ul>")
    labels = run_labels(runs)
    out.append(f"<h3>Training runs ({len(runs)})</h3>")
    if runs:
        out.append("<ul>")
        for label, r in zip(labels, runs):
            bits = []
            if r.train and "loss" in r.train:
                bits.append(f"{len(r.train['loss'])} logged steps")
            if r.eval is not None:
                bits.append(f"{len(r.eval.step)} evaluations, eps {', '.join(f'{x:g}' for x in r.eval.eps)}")
            out.append(f"<li>{_esc(label)} ({html.escape(Path(r.file).name)}): "
                       f"{html.escape('; '.join(bits) or 'no data')}</li>")
        out.append("</ul>")
    else:
        out.append("<p>none</p>")
    out.append(f"<h3>Probed models ({len(set(model_labels(entries)))})</h3>")
    if entries:
        out.append("<ul>")
        mlabels = model_labels(entries)
        for m in dict.fromkeys(mlabels):
            es = [e for lab, e in zip(mlabels, entries) if lab == m]
            per = [f"{inp} ({sum(e.input == inp for e in es)} domain(s))"
                   for inp in ordered_inputs({e.input for e in es})]
            by = set_text(measured_by(e) for e in es)
            out.append(f"<li>{html.escape(m)}: {html.escape(', '.join(per))}; measured by {html.escape(by)}</li>")
        out.append("</ul>")
    else:
        out.append("<p>none</p>")
    if items:
        ok = sum(it.status == "ok" for it in items)
        out.append(f"<p>Survey items: {len(items)} ({ok} ok).</p>")
    out.append("<h3>What the numbers mean</h3><ul>")
    out += [f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in GLOSSARY]
    out.append("</ul>")
    proxy = [r.name for r in runs if r.eval is not None and r.eval.proxy] + \
        sorted({e.model for e in entries if e.proxy})
    if proxy:
        out.append("<p>Values marked * are computed from proxy attention scores w_ij / sum_j w_ij (paper "
                   f"Sec. 7.4, Table 6; <a href=\"#proxy-scores\">what they are</a>), as the files say for: "
                   f"{html.escape(', '.join(proxy))}.</p>")
    else:
        out.append("<p>No file marks its Sink values as computed from proxy scores (attribute proxy_scores), "
                   "so no value is marked *. Variants whose attention scores are not a distribution "
                   "(e.g. sigmoid without normalisation) are measured with proxy scores by the probe even so."
                   "</p>")
    out.append(f"<p>Tables at eps = {eps:g}; every table is also in tables/ as Markdown and CSV, every "
               "figure in figures/ as PNG.</p>")
    notes = [n for rf in files for n in rf.notes] + rep.notes
    if notes:
        out.append("<h3>Notes</h3><ul>")
        out += [f'<li class="note">{_esc(n)}</li>' for n in notes]
        out.append("</ul>")
    if rep.skips:
        out.append('<h3 id="skipped">Skipped (what the files do not hold)</h3><ul>')
        out += [f'<li class="note">{_esc(line)}</li>' for line in skipped_lines(rep.skips)]
        out.append("</ul>")
    return "\n".join(out)
