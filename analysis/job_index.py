"""The pre-training job files by paper-table cell, for the report's paper tables and figures: every table
of the paper as jobs/pretrain/make_jobs.py lists it (GROUPS, the table the job files are generated from),
each cell's job file, and what that file sets. A cell is matched to a run of the results files by its job
file's run-name.

    index = JobIndex()                             # the job files of this checkout
    for group in index.groups: ...                 # make_jobs.Group: folder, title, cells, note
    name, settings = index.job(group, cell)        # "sec6_window/window_32.ini", {"run-name": ..., ...}
    index.cell_runs("sec6_window", runs)           # [(cell, settings, run)] of the cells that ran
"""
from pathlib import Path

from analysis.results import ini_settings
from jobs.pretrain import make_jobs

JOBS_DIR = make_jobs.HERE  # the job files sit beside the script that writes them


class JobIndex:
    """The cells of every table and their job files under `jobs_dir`, each file read once."""

    def __init__(self, jobs_dir=JOBS_DIR):
        self.jobs_dir = Path(jobs_dir)
        self.groups = [g for g in make_jobs.GROUPS if g.paper]  # the paper's tables
        self.studies = [g for g in make_jobs.GROUPS if not g.paper]  # sinklab's own (the BBM study)
        self._settings = {}  # job file -> its settings

    def job(self, group, cell):
        """(the cell's job file relative to jobs_dir, its settings); the settings are {} when the file is
        missing."""
        name = make_jobs.job_file(group, cell)
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
