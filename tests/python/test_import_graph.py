"""The import graph of analysis/, jobs/ and cells/ (tests/python/import_graph.py, read with Python's own import
machinery in a fresh interpreter): on the checkout it keeps every rule (no cycle between analysis/ and jobs/, no
statistics module importing a section, ...), and the checker is red on constructed packages that break each rule
once, imports inside functions and relative imports included."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKER = Path(__file__).resolve().parent / "import_graph.py"


def check(root, *extra):
    return subprocess.run([sys.executable, str(CHECKER), str(root), *extra], capture_output=True, text=True,
                          timeout=120)


def test_the_checkout_keeps_the_import_rules():
    proc = check(ROOT)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_the_graph_sees_the_imports_that_matter():
    proc = check(ROOT, "--edges")
    assert proc.returncode == 0, proc.stderr
    edges = json.loads(proc.stdout)
    assert {"analysis.report", "analysis.stats.atlas", "analysis.sections.bbm", "jobs.atlas.run",
            "jobs.pretrain.make_jobs", "cells.pretrain"} <= set(edges)
    assert "analysis.stats.convergence" in edges["jobs.atlas.run"]     # the runner's convergence rule
    assert "cells.atlas" in edges["analysis.sections.atlas"]           # the report reads the table, not jobs/
    assert "analysis.plan" in edges["analysis.sections.bridge"]        # an import inside a function
    assert "analysis.stats.bbm" in edges["analysis.sections.bbm"]      # the section renders the study's rules


# A constructed tree of the three packages that keeps every rule, and what each planted line breaks.
CLEAN = {
    "analysis/__init__.py": "",
    "analysis/results.py": "def read(): pass\n",
    "analysis/tables.py": "",
    "analysis/stats/__init__.py": "",
    "analysis/stats/rule.py": "from analysis.results import read\nfrom . import other\n",
    "analysis/stats/other.py": "",
    "analysis/sections/__init__.py": "",
    "analysis/sections/shown.py": "from analysis.stats import rule\nfrom cells import table\n",
    "jobs/__init__.py": "",
    "jobs/run.py": "from analysis.results import read\nfrom analysis.stats.rule import read as judge\n"
                   "from cells.table import CELLS\n",
    "cells/__init__.py": "",
    "cells/table.py": "CELLS = []\n",
}
PLANTED = {
    "a statistics module importing a section, inside a function": (
        "analysis/stats/rule.py", "def f():\n    from analysis.sections import shown\n",
        ["a statistics module imports presentation: analysis.stats.rule imports analysis.sections",
         "a statistics module imports presentation: analysis.stats.rule imports analysis.sections.shown"]),
    "a statistics module importing presentation by a relative import": (
        "analysis/stats/other.py", "from ..tables import x\n",
        ["a statistics module imports presentation: analysis.stats.other imports analysis.tables"]),
    "analysis importing a runner": (
        "analysis/sections/shown.py", "import jobs.run\n",
        ["cycle between packages analysis -> jobs -> analysis: analysis.sections.shown imports jobs.run; "
         "jobs.run imports analysis.results",
         "analysis imports jobs: analysis.sections.shown imports jobs.run"]),
    "the table importing analysis": (
        "cells/table.py", "from analysis.results import read\n",
        ["cycle between packages analysis -> cells -> analysis: analysis.sections.shown imports cells; "
         "cells.table imports analysis.results",
         "cells imports analysis: cells.table imports analysis.results"]),
    "a runner importing a section": (
        "jobs/run.py", "from analysis.sections import shown\n",
        ["jobs imports more of analysis than analysis.results and analysis.stats: jobs.run imports analysis.sections",
         "jobs imports more of analysis than analysis.results and analysis.stats: jobs.run imports "
         "analysis.sections.shown"]),
    "a dynamic import": (
        "analysis/results.py", "import importlib\nimportlib.import_module('jobs.run')\n",
        ["dynamic import (importlib.import_module or __import__) in analysis.results: the graph cannot see it"]),
}


def _tree(root, files):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_checker_passes_a_clean_tree(tmp_path):
    proc = check(_tree(tmp_path, CLEAN))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    edges = json.loads(check(tmp_path, "--edges").stdout)
    assert edges["analysis.stats.rule"] == ["analysis.results", "analysis.stats", "analysis.stats.other"]


@pytest.mark.parametrize("what", PLANTED)
def test_the_checker_is_red_on_a_planted_violation(tmp_path, what):
    path, line, expected = PLANTED[what]
    _tree(tmp_path, CLEAN)
    with open(tmp_path / path, "a") as f:
        f.write(line)
    proc = check(tmp_path)
    assert (proc.returncode, proc.stdout.splitlines(), proc.stderr) == (1, expected, "")
