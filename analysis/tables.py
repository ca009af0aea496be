"""The report's tables: one Table is a title, columns and rows of numbers or text, written as Markdown
and CSV under DIR/tables/ and shown inline in the HTML page (analysis.report's Report.table). CSV keeps
full precision; Markdown and HTML show each column with its format and mark proxy-score cells with "*".
"""
import csv
import html
import io
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

INLINE_ROWS = 500  # longer tables are linked, not shown on the page
PROXY_NOTE = "Values marked * are computed from proxy attention scores (the file says so)."
# Where the report first shows a proxy value (analysis.report: once per page, anchor #proxy-scores).
PROXY_EXPLAINED = (
    "* = computed from proxy attention scores. Attention without normalisation (sigmoid with Z = 1, the "
    "paper's sink-free variant) gives every key a weight in (0, 1), and a row's weights need not sum to one; "
    "alpha_1 and Sink_1 are then computed, as in the paper (Sec. 7.4, Table 6), from proxy scores "
    "w_ij / sum_j' w_ij', each key's share of the row's total weight. A proxy score near 1 on the first token "
    "says that the first token has most of a row's weight, not that the weight is large: with small absolute "
    "weights that is not softmax's sink, where a row's weights must sum to one and a query that attends to "
    "nothing else must put them somewhere.")

# Top-level directories of this machine's file system that results files cannot mean as HDF5 group names
# (/runs, /models, /items are the results schema's groups, not directories).
_H5_GROUPS = {"runs", "models", "items"}
_ABS_PATH = re.compile(r"(?<![\w./:~-])/[A-Za-z0-9._+@-]+(?:/[A-Za-z0-9._+@=-]*)*")


def _public_path(path):
    """An absolute path of this machine as the page shows it: relative to the working directory (the
    checkout the report runs in) when under it, else its last component."""
    p = Path(path)
    for root in (Path.cwd(), Path(__file__).resolve().parents[1]):
        try:
            rel = p.relative_to(root)
            return str(rel) if str(rel) != "." else p.name
        except ValueError:
            pass
    return p.name or path


def public_text(text):
    """`text` without paths of the machine: an absolute path whose first directory exists here (/tmp/x,
    /work/checkout/results/a.h5, /root/...) becomes relative to the checkout or its last component; HDF5
    paths (/runs/<run>/eval) stay."""
    def repl(m):
        first = m.group(0).split("/")[1]
        if first in _H5_GROUPS or not os.path.isdir("/" + first):
            return m.group(0)
        return _public_path(m.group(0).rstrip("/"))
    return _ABS_PATH.sub(repl, str(text))


@dataclass
class Table:
    """One table, written as DIR/tables/<name>.md and .csv and shown inline in the HTML page.
    Cells are numbers, text or None (empty); CSV keeps full precision, Markdown/HTML use `formats`
    (column -> format spec) and append "*" to the cells in `stars` ((row, column) indices)."""
    name: str
    title: str
    columns: list
    rows: list
    formats: dict = field(default_factory=dict)
    stars: set = field(default_factory=set)
    note: str = ""
    inline: bool = True   # False: linked only (also when longer than INLINE_ROWS)

    def _shown(self, r, c):
        v = self.rows[r][c]
        if v is None or (isinstance(v, float) and math.isnan(v)):
            text = ""
        elif isinstance(v, (float, np.floating)):
            text = format(float(v), self.formats.get(self.columns[c], ".4g"))
        else:
            text = str(v)
        return public_text(text) + ("*" if (r, c) in self.stars and text else "")

    def markdown(self):
        esc = lambda s: s.replace("|", "\\|")  # noqa: E731
        lines = [f"**{esc(public_text(self.title))}**", ""]
        lines.append("| " + " | ".join(esc(c) for c in self.columns) + " |")
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        for r in range(len(self.rows)):
            lines.append("| " + " | ".join(esc(self._shown(r, c)) for c in range(len(self.columns))) + " |")
        if self.note:
            lines += ["", esc(public_text(self.note))]
        if self.stars:
            lines += ["", PROXY_NOTE]
        return "\n".join(lines) + "\n"

    def csv_text(self):
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.columns)
        for row in self.rows:
            w.writerow([_csv_cell(v) for v in row])
        return buf.getvalue()

    def html(self):
        """The table as HTML: columns of numbers right-aligned, columns with text left-aligned (class "t")."""
        text = [any(isinstance(row[c], str) and row[c] for row in self.rows) for c in range(len(self.columns))]
        cls = [' class="t"' if t else "" for t in text]
        head = "".join(f"<th{k}>{html.escape(c)}</th>" for c, k in zip(self.columns, cls))
        out = ["<table>", f"<tr>{head}</tr>"]
        for r in range(len(self.rows)):
            out.append("<tr>" + "".join(f"<td{cls[c]}>{html.escape(self._shown(r, c))}</td>"
                                        for c in range(len(self.columns))) + "</tr>")
        out.append("</table>")
        return "\n".join(out)


def _csv_cell(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, (np.integer,)):
        return str(int(v))
    return str(v)


def plain_float(x):
    """A plain float (None stays None): numpy scalars from the files become table cells."""
    return None if x is None else float(x)


def pivot(long, name, title, keys, across, value, label=lambda v: str(v)):
    """The long table `long` (one row per key x `across` value) as a wide one for the page: one row per
    distinct `keys` (columns of `long`, in order of first appearance), one column per distinct value of the
    column `across` (headed label(value)), the cells from column `value` (empty where `long` has none). The
    long form stays the CSV of `long`."""
    at = {c: i for i, c in enumerate(long.columns)}
    heads = list(dict.fromkeys(row[at[across]] for row in long.rows))
    wide = {}
    for row in long.rows:
        key = tuple(row[at[k]] for k in keys)
        wide.setdefault(key, {})[row[at[across]]] = row[at[value]]
    rows = [list(key) + [cells.get(h) for h in heads] for key, cells in wide.items()]
    fmt = long.formats.get(value)
    columns = list(keys) + [label(h) for h in heads]
    return Table(name, title, columns, rows, {c: fmt for c in columns[len(keys):]} if fmt else {}, note=long.note)
