"""The report's tables: one Table is a title, columns and rows of numbers or text, written as Markdown
and CSV under DIR/tables/ and shown inline in the HTML page (analysis.report's Report.table). CSV keeps
full precision; Markdown and HTML show each column with its format and mark proxy-score cells with "*".
"""
import csv
import html
import io
import math
from dataclasses import dataclass, field

import numpy as np

INLINE_ROWS = 500  # longer tables are linked, not shown on the page
PROXY_NOTE = "Values marked * are computed from proxy attention scores (the file says so)."


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
        return text + ("*" if (r, c) in self.stars and text else "")

    def markdown(self):
        esc = lambda s: s.replace("|", "\\|")  # noqa: E731
        lines = [f"**{esc(self.title)}**", ""]
        lines.append("| " + " | ".join(esc(c) for c in self.columns) + " |")
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        for r in range(len(self.rows)):
            lines.append("| " + " | ".join(esc(self._shown(r, c)) for c in range(len(self.columns))) + " |")
        if self.note:
            lines += ["", esc(self.note)]
        return "\n".join(lines) + "\n"

    def csv_text(self):
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.columns)
        for row in self.rows:
            w.writerow([_csv_cell(v) for v in row])
        return buf.getvalue()

    def html(self):
        out = ['<table>', "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in self.columns) + "</tr>"]
        for r in range(len(self.rows)):
            out.append("<tr>" + "".join(f"<td>{html.escape(self._shown(r, c))}</td>"
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
