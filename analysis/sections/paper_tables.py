"""Section "The paper's tables": the paper's pre-training tables as the paper prints them, filled from the
runs: one table per group of cells/pretrain.py (which knows every cell, its job file and the numbers
the paper reports; read through analysis.job_index), the measured value beside the paper's, and each cell's
status (analysis.job_index.cell_status):

  done                        the run reached the steps it was started with (a note says when those differ
                              from the job file's, e.g. a short test run)
  in progress (step s of n)   stopped short of its steps, results file written in the last RECENT_MINUTES
  incomplete (step s of n)    stopped short of its steps, results file older than that
  failed (...)                the last logged training loss is not finite
  not run                     no results file given holds the cell's run (its job file's run-name)

A cell without a run shows nothing but its status. Measured values are those of the run's last
evaluation: Sink_1^eps (eps = 0.3 unless --eps says otherwise) and the validation loss; cells of runs
with a bias position also Sink_*; cells with a data intervention (Table 10 right: x_fix at position k)
Sink_1..Sink_K on inputs carrying that intervention (eval/sink_k_intervened).
"""
from __future__ import annotations

from analysis.job_index import cell_status, steps_setting
from analysis.results import match_eps
from analysis.tables import Table

def _measured(run, eps, intervened_k):
    """(Sink_1, Sink_*, valid loss, Sink_1..K with the intervention) at the last evaluation."""
    ev = None if run is None else run.eval
    if ev is None or not len(ev.step):
        return None, None, None, None
    i = match_eps(ev.eps, eps)
    sink1 = None if i is None else float(ev.sink[-1, i])
    star = None if i is None or ev.sink_star is None else float(ev.sink_star[-1, i])
    moved = None
    if intervened_k and i is not None and ev.sink_k_intervened is not None:
        values = ev.sink_k_intervened[-1, :, i]
        moved = ", ".join(f"Sink_{k + 1} {float(v):.2f}" for k, v in enumerate(values))
    return sink1, star, float(ev.valid_loss[-1]), moved


def _paper_number(text):
    """A paper value as a number where it is one ("18.18" -> 18.18), else the text ("illegible", "fail")."""
    try:
        return float(text.rstrip("*"))
    except ValueError:
        return None if text == "—" else text


def paper_table_rows(group, job_settings, runs_by_name, eps, now=None):
    """The rows of one group's table and whether its Sink_* and intervention columns are in use.
    job_settings(group, cell) -> (job file name, its settings)."""
    has_star = any("attn-bias" in c.settings or "Sink_*" in c.note for c in group.cells)
    has_moved = any("fixed-token-position" in c.settings or "resample-positions" in c.settings for c in group.cells)
    rows, stars = [], set()
    for cell in group.cells:
        job, settings = job_settings(group, cell)
        run = runs_by_name.get(settings.get("run-name", ""))
        status, note = cell_status(run, steps_setting(settings), now)
        sink1, star, loss, moved = _measured(run, eps, has_moved)
        row = [cell.label, job, _paper_number(cell.sink1), sink1]
        if run is not None and run.eval is not None and run.eval.proxy and sink1 is not None:
            stars.add((len(rows), 3))
        if has_star:
            row.append(star)
        if has_moved:
            row.append(moved)
        row += [_paper_number(cell.loss), loss, cell.note, status, note]
        rows.append(row)
    return rows, stars, has_star, has_moved


def write_section(rep, data):
    """Section "The paper's tables": every group of cells/pretrain.py as a table, when any cell has a run."""
    runs, eps, index = data.runs, data.eps, data.job_index
    runs_by_name = {r.name: r for r in runs}
    known = index.run_names()
    if not any(name in known for name in runs_by_name):
        rep.skipped("the paper's tables", "no run of the files is a cell of jobs/pretrain (run-name as its job file)")
        return
    rep.section("The paper's tables", anchor="paper-tables")
    counts = {}
    for group in index.groups:
        rows, stars, has_star, has_moved = paper_table_rows(group, index.job, runs_by_name, eps)
        cols = ["cell", "job file", "paper Sink_1^0.3 (%)", f"Sink_1^{eps:g} (%)"]
        if has_star:
            cols.append(f"Sink_*^{eps:g} (%)")
        if has_moved:
            cols.append(f"Sink_k^{eps:g} with the intervention (%)")
        cols += ["paper valid loss", "valid loss", "paper also reports", "status", "note"]
        fmts = {cols[3]: ".2f", "valid loss": ".3f", "paper valid loss": ".2f", "paper Sink_1^0.3 (%)": ".2f"}
        if has_star:
            fmts[cols[4]] = ".2f"
        for row in rows:
            key = row[cols.index("status")].split(" (")[0]
            counts[key] = counts.get(key, 0) + 1
        rep.table(Table(group.folder, group.title, cols, rows, fmts, stars, note=group.note))
    rep.para("Cells: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])) + ".")
