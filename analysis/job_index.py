"""The pre-training job files by paper-table cell, for the report's paper tables and figures: every table
of the paper as cells/pretrain.py lists it (GROUPS, the table the job files are generated from), each cell's job
file, and what that file sets. A cell is matched to a run of the results files by its job file's run-name, and
its run's status (cell_status) read against the job file's steps.

    index = JobIndex()                             # the job files of this checkout
    for group in index.groups: ...                 # cells.pretrain.Group: folder, title, cells, note
    name, settings = index.job(group, cell)        # "sec6_window/window_32.ini", {"run-name": ..., ...}
    index.cell_runs("sec6_window", runs)           # [(cell, settings, run)] of the cells that ran
    cell_status(run, steps_setting(settings))      # ("done", "") or "in progress (step s of n)", ...
"""
import math
import time
from pathlib import Path

from analysis.results import ini_settings
from cells.pretrain import GROUPS, JOBS_DIR, job_file

RECENT_MINUTES = 30  # a run stopped short of its steps is "in progress" when its file is younger than this


class JobIndex:
    """The cells of every table and their job files under `jobs_dir`, each file read once."""

    def __init__(self, jobs_dir=JOBS_DIR):
        self.jobs_dir = Path(jobs_dir)
        self.groups = [g for g in GROUPS if g.paper]  # the paper's tables
        self.studies = [g for g in GROUPS if not g.paper]  # sinklab's own (the BBM study)
        self._settings = {}  # job file -> its settings

    def job(self, group, cell):
        """(the cell's job file relative to jobs_dir, its settings); the settings are {} when the file is
        missing."""
        name = job_file(group, cell)
        if name not in self._settings:
            path = self.jobs_dir / name
            self._settings[name] = ini_settings(path.read_text()) if path.is_file() else {}
        return name, self._settings[name]

    def run_names(self):
        """The run-names of every cell's job file."""
        return {self.job(group, cell)[1].get("run-name") for group in self.groups for cell in group.cells}

    def cell_runs(self, folder, runs):
        """[(cell, job settings, run)] of the cells of group `folder` that have a run among `runs` (matched
        by the job file's run-name), in the group's order."""
        by_name = {r.name: r for r in runs}
        out = []
        for group in self.groups + self.studies:
            if group.folder != folder:
                continue
            for cell in group.cells:
                _, settings = self.job(group, cell)
                run = by_name.get(settings.get("run-name", ""))
                if run is not None:
                    out.append((cell, settings, run))
        return out


def steps_setting(settings):
    """The steps a job file's (or a run's) settings ask for, None when they name none."""
    try:
        return int(float(settings.get("steps")))
    except (TypeError, ValueError):
        return None


def cell_status(run, job_steps, now=None):
    """(status text, note) of a cell whose run is `run` (None: not run): done, in progress (step s of n),
    incomplete (step s of n) or failed (...); the note says when the run's steps differ from the job file's."""
    if run is None:
        return "not run", ""
    steps = steps_setting(ini_settings(run.config)) or job_steps
    note = ""
    if steps is not None and job_steps is not None and steps != job_steps:
        note = f"run of {steps} steps (job file: {job_steps})"
    train = run.train or {}
    # /train/step is 0-based: the row of step s is logged when s + 1 steps are done
    last_step = int(train["step"][-1]) + 1 if "step" in train and len(train["step"]) else 0
    if "loss" in train and len(train["loss"]) and not math.isfinite(float(train["loss"][-1])):
        return f"failed (loss {float(train['loss'][-1])} at step {last_step})", note
    if steps is not None and last_step >= steps:
        return "done", note
    age_minutes = ((now or time.time()) - Path(run.file).stat().st_mtime) / 60
    state = "in progress" if age_minutes < RECENT_MINUTES else "incomplete"
    return f"{state} (step {last_step} of {steps if steps is not None else '?'})", note
