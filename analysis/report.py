"""The offline report of sinklab results: the paper's tables as Markdown and CSV, its figures as PNG,
and one HTML page (index.html) that shows them all.

    python -m analysis.report results/*.h5 -o report/ [--eps 0.3]
    python -m analysis.report results/atlas/ -o report/     # a directory: every results.h5 under it

The page opens with the findings: one sentence per finding (Report.finding, added by the sections as they
measure it), each linked to its figure, also written to DIR/findings.md. Sections follow, numbered in page
order (SECTIONS; one module each under analysis/sections/, each left out, or its missing parts listed at the
end, when the files do not hold what it needs):
  atlas           the emergence atlas (jobs/atlas; runs named atlas.<scale>.<cell>.s<seed>): per cell and scale
                  a forest plot of the median emergence step and the sink fraction with their 95 % intervals, the
                  table against each cell's expectation with a verdict from the intervals, by Guo's measure and the
                  paper's Sink_1 (analysis/stats/atlas.py).
  atlas_paper     the atlas in the paper's setting (cells/atlas.py PAPER_CELLS: rows anywhere, 3 layers and 1,
                  a fixed budget): the earlier disagreements side by side with it, where the sink sits per layer,
                  the verdicts that need a constant first token, the sink logit's learning-rate question.
  bridge          from the toy to text (jobs/bridge; runs named bridge.<scale>.<size>_<rows>_lr<lr>.s<seed>): small
                  models on real text, several seeds a cell, Sink_1^eps and mean alpha_1 against tokens seen with
                  intervals, onsets in tokens, BOS first against packed, onset against size beside the 60M plan
                  (analysis/stats/bridge.py).
  bbm             sink emergence on Bigram-Backcopy (sinklab-pretrain --bbm-meta runs): BOS attention against
                  steps for every run on one plot (Fig. 4 middle's form) beside the copy / bigram losses, BOS
                  residual and value norms, raw weights of the proxy-score runs, and one table of each run
                  against the paper's expectation for its cell (cells/pretrain.py's study "bbm"; the rules:
                  analysis/stats/bbm.py).
  training        the other pre-training runs (/runs/<run>): loss, valid loss and Sink_1^eps over steps; a
                  side-by-side table and figure when there are several runs; massive-activation ratio per layer
                  at the last evaluation (Fig. 7, with the pre-norm ratio of post-norm models); alpha_1 over
                  layers and heads; Sink_*.
  models          probed/surveyed models (/models/<model>/<input>/<domain>): Table 1 (left) layout
                  (natural = mean over domains, random, repeat), the per-domain table, and per model and
                  input (model_figures) the l2 norms of the first token vs the rest (Figs. 2, 11-14), alpha_1
                  heatmaps (Figs. 19-24), massive-activation ratio, last-token-to-first attention, QK cosine /
                  norm-product maps and attention maps (Figs. 2, 15-18, 25-26).
  downstream      Sink beside multiple-choice accuracy (Fig. 10).
  ablations       what the sink does: the loss under the survey's ablations, and against the attention window.
  sft             fine-tuning (sinklab-sft runs, attribute init_from), on its own step axis: Fig. 30 (training
                  loss and gradient norm over the fine-tuning steps, the stability monitor's events marked) and
                  the sink of the base model (eval step 0) beside the fine-tuned one (last eval) on the same
                  probe set, Table 1 (right) layout.
  paper_tables    the paper's tables: every table of cells/pretrain.py as the paper prints it, the
                  measured value beside the paper's and each cell's status (done / in progress / incomplete /
                  failed / not run), when any run of the files is one of its cells (analysis/job_index.py).
  paper_figures   the paper's comparison figures: Fig. 4 left (Sink vs parameter count), Fig. 5 middle (Sink
                  per position, prefix LM), Figs. 5 right and 28 (vs training-data budget), Fig. 6 (vs window
                  size, absolute and relative to the window start), Fig. 9 (per domain at each eps), each with
                  its numbers as a table; a figure without data is listed under Skipped, not drawn.
  items           survey bookkeeping (/items/<id>).
  closing         (sections/closing.py, anchor "summary") what was read (files, runs, models), the glossary,
                  notes and the skipped parts (one line per reason) close the page.
No text of the page names a path of the machine: absolute paths are shown relative to the checkout or by
their last component (analysis.tables.public_text).
Tables are analysis.tables.Table, figures are drawn by analysis.figures.
Output: DIR/index.html, DIR/tables/*.md + *.csv, DIR/figures/*.png. A bad input file ends the program
with one line naming it and exit status 1, before anything is written: one that is not HDF5, and one that holds
nothing to show (an empty HDF5 file, data_prep's survey_inputs.h5; results.nothing_to_report). What a run lacks
(no train/loss, a malformed dataset) is a note naming the run and the dataset, whichever section shows it.
"""
import argparse
import html
import re
import sys
from pathlib import Path

from analysis.job_index import JOBS_DIR, JobIndex
from analysis.results import DEFAULT_EPS, ResultsError, nothing_to_report, open_results
from analysis.sections import (ReportData, ablations, atlas, atlas_paper, bbm, bridge, downstream, items, models,
                               paper_figures, paper_tables, sft, training)
from analysis.sections.labels import run_labels
from analysis.sections.closing import closing_html
from analysis.tables import INLINE_ROWS, PROXY_EXPLAINED, public_text

PROG = "analysis.report"
# The page's sections in order: each module's write_section(rep, data) adds its part.
SECTIONS = (atlas, atlas_paper, bridge, bbm, training, models, downstream, ablations, sft, paper_tables, paper_figures, items)


class Report:
    """Collects the page's blocks (HTML snippets) and writes tables and figures as they come. Sections are
    numbered in page order (section()); the findings (finding()) open the page, the notes and the skipped
    parts (skipped(), one line per reason) close it. No text of the page names a path of the machine
    (tables.public_text)."""

    def __init__(self, out_dir):
        self.out = Path(out_dir)
        (self.out / "tables").mkdir(parents=True, exist_ok=True)
        (self.out / "figures").mkdir(parents=True, exist_ok=True)
        self.blocks = []
        self.notes = []          # shown at the end of the page, with the provenance
        self.skips = []          # (what, why): listed at the end of the page, one line per reason
        self.findings = {}       # group (the section's title) -> [(text, href)]: the block that opens the page
        self.current = ""        # the title of the section being written
        self.tables = []
        self.figures = []
        self.sections = 0
        self.proxy_explained = False
        self._names = {"tables": set(), "figures": set()}

    def _unique(self, name, kind):
        """A file name from `name` (letters, digits, . _ -), unique among the tables or figures."""
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "x"
        name, i = base, 2
        while name in self._names[kind]:
            name, i = f"{base}_{i}", i + 1
        self._names[kind].add(name)
        return name

    def section(self, title, anchor):
        """A numbered section heading ("2. Training runs"); the number follows the page order."""
        self.sections += 1
        self.current = title
        self.heading(2, f"{self.sections}. {title}", anchor=anchor)

    def heading(self, level, text, anchor=None):
        a = f' id="{html.escape(anchor)}"' if anchor else ""
        self.blocks.append(f"<h{level}{a}>{html.escape(public_text(text))}</h{level}>")

    def para(self, text, cls=None):
        c = f' class="{cls}"' if cls else ""
        self.blocks.append(f"<p{c}>{html.escape(public_text(text))}</p>")

    def bullets(self, items):
        """A compact list of sentences (rules, definitions)."""
        self.blocks.append('<ul class="compact">' + "".join(f"<li>{html.escape(public_text(t))}</li>" for t in items)
                           + "</ul>")

    def finding(self, text, href=None, lead=False):
        """One sentence of the findings block at the top of the page, under the title of the section that
        adds it, linked to `href` (a figure's or table's anchor, as figure() and table() return them); `lead`:
        first in its group (the group's summary)."""
        group = self.findings.setdefault(self.current, [])
        group.insert(0, (text, href)) if lead else group.append((text, href))

    def skipped(self, what, why):
        """A section or figure that is not there: listed at the end of the page, not where it would be."""
        self.skips.append((what, why))

    def proxy_note(self):
        """The note under the first table or figure with proxy values: what proxy scores are (once per
        page, anchor #proxy-scores); later ones link to it."""
        if not self.proxy_explained:
            self.proxy_explained = True
            return f'<p class="note" id="proxy-scores">{html.escape(PROXY_EXPLAINED)}</p>'
        return '<p class="note">* = computed from proxy attention scores (<a href="#proxy-scores">what they are' \
               '</a>).</p>'

    def table(self, t):
        """Writes the table's Markdown and CSV and shows it; returns its anchor."""
        t.name = self._unique(t.name, "tables")
        (self.out / "tables" / f"{t.name}.md").write_text(t.markdown())
        (self.out / "tables" / f"{t.name}.csv").write_text(t.csv_text())
        self.tables.append(t)
        links = (f'<a href="tables/{t.name}.md">{t.name}.md</a> · '
                 f'<a href="tables/{t.name}.csv">{t.name}.csv</a>')
        anchor = f"tab-{t.name}"
        parts = [f'<div class="table" id="{anchor}"><p class="caption">{html.escape(public_text(t.title))} '
                 f'({links})</p>']
        if t.inline and len(t.rows) <= INLINE_ROWS:
            parts.append(f'<div class="scroll">{t.html()}</div>')
        else:
            parts.append(f"<p>{len(t.rows)} rows: see the CSV.</p>")
        if t.note:
            parts.append(f'<p class="note">{html.escape(public_text(t.note))}</p>')
        if t.stars and t.inline:
            parts.append(self.proxy_note())
        parts.append("</div>")
        self.blocks.append("\n".join(parts))
        return anchor

    def figure(self, name, title, caption, draw, *args, **kwargs):
        """draw(path, title, *args) writes the PNG with its short `title`; the page shows it with the
        `caption` (the detail: model, input, T, files' notes) under it. Returns the figure's anchor."""
        name = self._unique(name, "figures")
        path = self.out / "figures" / f"{name}.png"
        draw(path, title, *args, **kwargs)
        self.figures.append(path)
        anchor = f"fig-{name}"
        shown = html.escape(public_text(title))
        self.blocks.append(f'<figure id="{anchor}"><img src="figures/{name}.png" alt="{shown}">'
                           f"<figcaption><b>{shown}.</b> {html.escape(public_text(caption))}</figcaption></figure>")
        return anchor

    def findings_html(self):
        """The block that opens the page: one sentence per finding, each linked to its figure or table."""
        out = ['<section id="findings"><h2>Findings</h2>']
        if not self.findings:
            out.append("<p>The files hold nothing to report (see What was read, at the end).</p>")
        for group, items in self.findings.items():
            if group:
                out.append(f"<h3>{html.escape(group)}</h3>")
            out.append("<ul>")
            for text, href in items:
                link = f' <a href="#{html.escape(href)}">(figure)</a>' if href and href.startswith("fig-") else \
                    (f' <a href="#{html.escape(href)}">(table)</a>' if href else "")
                out.append(f"<li>{html.escape(public_text(text))}{link}</li>")
            out.append("</ul>")
        if self.proxy_explained and any("*" in text for items in self.findings.values() for text, _ in items):
            out.append('<p class="note">* = computed from proxy attention scores, the paper\'s measure for attention '
                       'without normalisation (<a href="#proxy-scores">what they are</a>).</p>')
        out.append("</section>")
        return "\n".join(out)

    def write_findings(self):
        """DIR/findings.md: the findings' sentences as the page shows them, under the same headings (for
        READMEs and notes to quote)."""
        lines = []
        for group, items in self.findings.items():
            lines += ([f"**{group}**", ""] if group else []) + [f"- {public_text(text)}" for text, _ in items] + [""]
        (self.out / "findings.md").write_text("\n".join(lines))

    def write_html(self, closing_html):
        page = [
            "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            "<title>sinklab report</title>",
            "<style>body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em}"
            "table{border-collapse:collapse;margin:.3em 0 1em}td,th{border:1px solid #bbb;padding:2px 6px;"
            "font-size:13px;text-align:right;vertical-align:top}th{background:#eee}"
            "td:first-child,th:first-child,td.t,th.t{text-align:left}div.scroll{max-width:100%;overflow-x:auto}"
            "img{max-width:100%;height:auto}figure{margin:1em 0}figcaption,.caption{font-size:13px;color:#333}"
            "#findings{background:#f5f8fc;border:1px solid #c9d6e8;padding:.1em 1em .4em;margin-bottom:1.5em}"
            "#findings h2{margin:.4em 0 .2em}#findings h3{font-size:15px;margin:.5em 0 .1em}"
            "#findings ul{margin:0;padding-left:1.3em}#findings li{font-size:13.5px;margin:.12em 0;line-height:1.3}"
            ".note{color:#8a4b00;font-size:13px}code{font-size:12px}"
            "ul.compact li{font-size:13px;margin:.15em 0}"
            "p,li,figcaption,code{overflow-wrap:anywhere}td{overflow-wrap:break-word}</style></head><body>",
            "<h1>sinklab report</h1>", self.findings_html(), *self.blocks, closing_html, "</body></html>"]
        (self.out / "index.html").write_text("\n".join(page) + "\n")


def build_report(paths, out_dir, eps=DEFAULT_EPS, jobs_dir=JOBS_DIR):
    """Reads `paths` and writes the report into `out_dir`; returns the Report. ResultsError on bad input.
    `jobs_dir`: where the job files of the paper's cells are (their run-names match cells to runs)."""
    files = []
    try:
        for p in paths:
            files.append(open_results(p))
            why = nothing_to_report(files[-1])
            if why:
                raise ResultsError(f"{p}: {why}")
        data = ReportData(files=files, runs=[r for rf in files for r in rf.runs],
                          entries=[e for rf in files for e in rf.entries],
                          items=[it for rf in files for it in rf.items],
                          scores=[s for rf in files for s in rf.scores],
                          ablation_losses=[a for rf in files for a in rf.ablation_losses],
                          eps=eps, job_index=JobIndex(jobs_dir))
        try:
            rep = Report(out_dir)
        except OSError as e:
            raise ResultsError(f"-o {out_dir}: cannot create the directory: {e.strerror or e}") from None
        # What the reader found missing or malformed in a run (no train/loss, a dataset of the wrong rank) is
        # listed whichever section shows the run.
        rep.notes += [f"run {label}: {note}" for label, r in zip(run_labels(data.runs), data.runs) for note in r.notes]
        for section in SECTIONS:
            section.write_section(rep, data)
        rep.write_html(closing_html(rep, data))
        rep.write_findings()
        return rep
    finally:
        for rf in files:
            rf.close()


def results_paths(paths):
    """The files to read: each path as given, a directory as every results.h5 under it (sorted); ResultsError
    for a directory without one."""
    out = []
    for p in map(Path, paths):
        found = sorted(p.rglob("results.h5")) if p.is_dir() else [p]
        if not found:
            raise ResultsError(f"{p}: a directory without any results.h5 under it")
        out += found
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="sinklab results files (HDF5), or directories: every results.h5 under "
                                             "them (an atlas's runs)")
    ap.add_argument("-o", "--out", default="report", help="output directory (default: report)")
    ap.add_argument("--eps", type=float, default=DEFAULT_EPS, help="threshold of the main tables (default 0.3)")
    args = ap.parse_args(argv)
    try:
        rep = build_report(results_paths(args.files), args.out, args.eps)
    except ResultsError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    print(f"{PROG}: {len(rep.tables)} tables, {len(rep.figures)} figures -> {Path(args.out) / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
