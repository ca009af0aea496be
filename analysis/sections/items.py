"""Section "Survey work items" (/items/<id>): each item's status, rank, time and error; the items not ok
are also listed in the page's notes.
"""
import numpy as np

from analysis.results import attr_text
from analysis.tables import Table, plain_float


def write_section(rep, data):
    """The items table (no section without items); the items not ok also go to the page's notes."""
    items = data.items
    if not items:
        return
    rep.section("Survey work items", anchor="items")
    rows = [[it.id, it.status, attr_text(it.rank) if it.rank is not None else None,
             plain_float(it.seconds) if it.seconds is not None and np.ndim(it.seconds) == 0 else None, it.error]
            for it in sorted(items, key=lambda it: it.id)]
    failed = [r for r in rows if r[1] != "ok"]
    rep.para(f"{len(rows)} item(s): {len(rows) - len(failed)} ok, {len(failed)} not ok.")
    rep.table(Table("items", "Survey items (/items/<id>)", ["id", "status", "rank", "seconds", "error"], rows,
                    {"seconds": ".1f"}))
    if failed:
        rep.notes.append(f"{len(failed)} survey item(s) not ok: " + ", ".join(r[0] for r in failed[:20])
                         + (" ..." if len(failed) > 20 else ""))
