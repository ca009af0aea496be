"""The offline report of sinklab results: the paper's tables as Markdown and CSV, its figures as PNG,
and one HTML page (index.html) that shows them all.

    python -m analysis.report results/*.h5 -o report/ [--eps 0.3]

Sections, in page order (SECTIONS; one module each under analysis/sections/, each skipped with a note
saying why when the files do not hold what it needs):
  training        1. training runs (/runs/<run>): loss, valid loss and Sink_1^eps over steps; a side-by-side
                  table and figure when there are several runs; massive-activation ratio per layer at the
                  last evaluation (Fig. 7, with the pre-norm ratio of post-norm models); alpha_1 over layers
                  and heads; Sink_*.
  models          2. probed/surveyed models (/models/<model>/<input>/<domain>): Table 1 (left) layout
                  (natural = mean over domains, random, repeat), the per-domain table, and per model and
                  input (model_figures) the l2 norms of the first token vs the rest (Figs. 2, 11-14), alpha_1
                  heatmaps (Figs. 19-24), massive-activation ratio, last-token-to-first attention, QK cosine /
                  norm-product maps and attention maps (Figs. 2, 15-18, 25-26).
  downstream      Sink beside multiple-choice accuracy (Fig. 10).
  ablations       what the sink does: the loss under the survey's ablations, and against the attention window.
  paper_tables    the paper's tables: every table of jobs/pretrain/make_jobs.py as the paper prints it, the
                  measured value beside the paper's and each cell's status (done / in progress / incomplete /
                  failed / not run), when any run of the files is one of its cells (analysis/job_index.py).
  paper_figures   the paper's comparison figures: Fig. 4 left (Sink vs parameter count), Fig. 5 middle (Sink
                  per position, prefix LM), Figs. 5 right and 28 (vs training-data budget), Fig. 6 (vs window
                  size, absolute and relative to the window start), Fig. 9 (per domain at each eps), each with
                  its numbers as a table; a figure without data is listed under Skipped, not drawn.
  items           3. survey bookkeeping (/items/<id>).
  sft             5. fine-tuning (sinklab-sft runs, attribute init_from): Fig. 30 (training loss and gradient
                  norm over the fine-tuning steps, the stability monitor's events marked) and the sink of the
                  base model (eval step 0) beside the fine-tuned one (last eval) on the same probe set, Table 1
                  (right) layout.
  summary         what was read (files, runs, models), the glossary, notes and skipped sections close the page.
Tables are analysis.tables.Table, figures are drawn by analysis.figures.
Output: DIR/index.html, DIR/tables/*.md + *.csv, DIR/figures/*.png. A bad input file ends the program
with one line naming it and exit status 1.
"""
import argparse
import html
import re
import sys
from pathlib import Path

from analysis.job_index import JOBS_DIR, JobIndex
from analysis.results import DEFAULT_EPS, ResultsError, open_results
from analysis.sections import (ReportData, ablations, downstream, items, models, paper_figures, paper_tables, sft,
                               training)
from analysis.sections.summary import summary_html
from analysis.tables import INLINE_ROWS

PROG = "analysis.report"
# The page's sections in order: each module's write_section(rep, data) adds its part.
SECTIONS = (training, models, downstream, ablations, paper_tables, paper_figures, items, sft)


class Report:
    """Collects the page's blocks (HTML snippets) and writes tables and figures as they come."""

    def __init__(self, out_dir):
        self.out = Path(out_dir)
        (self.out / "tables").mkdir(parents=True, exist_ok=True)
        (self.out / "figures").mkdir(parents=True, exist_ok=True)
        self.blocks = []
        self.notes = []          # shown at the end of the page, with the provenance
        self.skips = []          # "Skipped: what: why." lines, listed at the end of the page
        self.tables = []
        self.figures = []
        self._names = {"tables": set(), "figures": set()}

    def _unique(self, name, kind):
        """A file name from `name` (letters, digits, . _ -), unique among the tables or figures."""
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "x"
        name, i = base, 2
        while name in self._names[kind]:
            name, i = f"{base}_{i}", i + 1
        self._names[kind].add(name)
        return name

    def heading(self, level, text, anchor=None):
        a = f' id="{html.escape(anchor)}"' if anchor else ""
        self.blocks.append(f"<h{level}{a}>{html.escape(text)}</h{level}>")

    def para(self, text, cls=None):
        c = f' class="{cls}"' if cls else ""
        self.blocks.append(f"<p{c}>{html.escape(text)}</p>")

    def skipped(self, what, why):
        """A section or figure that is not there: listed at the end of the page, not where it would be."""
        self.skips.append(f"Skipped: {what}: {why}.")

    def table(self, t):
        t.name = self._unique(t.name, "tables")
        (self.out / "tables" / f"{t.name}.md").write_text(t.markdown())
        (self.out / "tables" / f"{t.name}.csv").write_text(t.csv_text())
        self.tables.append(t)
        links = (f'<a href="tables/{t.name}.md">{t.name}.md</a> · '
                 f'<a href="tables/{t.name}.csv">{t.name}.csv</a>')
        parts = [f'<div class="table"><p class="caption">{html.escape(t.title)} ({links})</p>']
        if t.inline and len(t.rows) <= INLINE_ROWS:
            parts.append(t.html())
        else:
            parts.append(f"<p>{len(t.rows)} rows: see the CSV.</p>")
        if t.note:
            parts.append(f'<p class="note">{html.escape(t.note)}</p>')
        parts.append("</div>")
        self.blocks.append("\n".join(parts))

    def figure(self, name, caption, draw, *args, **kwargs):
        """draw(path, caption, *args) writes the PNG; the page shows it with the caption under it."""
        name = self._unique(name, "figures")
        path = self.out / "figures" / f"{name}.png"
        draw(path, caption, *args, **kwargs)
        self.figures.append(path)
        self.blocks.append(f'<figure><img src="figures/{name}.png" alt="{html.escape(caption)}">'
                           f"<figcaption>{html.escape(caption)}</figcaption></figure>")

    def write_html(self, summary_html):
        page = [
            "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            "<title>sinklab report</title>",
            "<style>body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em}"
            "table{border-collapse:collapse;margin:.3em 0 1em}td,th{border:1px solid #bbb;padding:2px 6px;"
            "font-size:13px;text-align:right}th{background:#eee}td:first-child,th:first-child{text-align:left}"
            "img{max-width:100%}figure{margin:1em 0}figcaption,.caption{font-size:13px;color:#333}"
            ".note{color:#8a4b00;font-size:13px}code{font-size:12px}</style></head><body>",
            "<h1>sinklab report</h1>", *self.blocks, summary_html, "</body></html>"]
        (self.out / "index.html").write_text("\n".join(page) + "\n")


def build_report(paths, out_dir, eps=DEFAULT_EPS, jobs_dir=JOBS_DIR):
    """Reads `paths` and writes the report into `out_dir`; returns the Report. ResultsError on bad input.
    `jobs_dir`: where the job files of the paper's cells are (their run-names match cells to runs)."""
    files = []
    try:
        for p in paths:
            files.append(open_results(p))
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
        for section in SECTIONS:
            section.write_section(rep, data)
        rep.write_html(summary_html(rep, data))
        return rep
    finally:
        for rf in files:
            rf.close()


def main(argv=None):
    ap = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="sinklab results files (HDF5)")
    ap.add_argument("-o", "--out", default="report", help="output directory (default: report)")
    ap.add_argument("--eps", type=float, default=DEFAULT_EPS, help="threshold of the main tables (default 0.3)")
    args = ap.parse_args(argv)
    try:
        rep = build_report(args.files, args.out, args.eps)
    except ResultsError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    print(f"{PROG}: {len(rep.tables)} tables, {len(rep.figures)} figures -> {Path(args.out) / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
