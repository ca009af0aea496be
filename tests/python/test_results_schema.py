"""The declared HDF5 results schema, src/io/results_schema.tsv (docs/DESIGN.md, "HDF5 results").

Every test of this suite runs with SINKLAB_SCHEMA_CHECK set (conftest.py): each write of every binary the tests
run is checked by io::ResultsSchema (C++), each read of analysis.results by analysis.results_schema, so the
real writers and the reader meet the schema wherever the suite exercises them. Here:
- every declared item is written by the writer it names: a static scan of that writer's source for the item's
  name as a path component of a string literal. Static, because many items are written only where this suite
  cannot go (a CUDA run's device_facts, a Jamba model's attention_layers, a hellaswag item's scores): collecting
  the paths the test runs write would declare those unwritten, or need a GPU;
- every reader it names is a function of analysis/results.py;
- planted: a writer run against the schema without one line its run writes fails, naming the path; results.py
  reading a real file against the schema without one line it reads fails, naming the path.
"""
import os
import re
import subprocess
from pathlib import Path

import pytest

from analysis import results_schema
from analysis.results import open_results
from analysis.results_schema import SCHEMA_PATH, SchemaError, parse

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", REPO_ROOT / "build" / "bin"))
PRETRAIN = BIN / "sinklab-pretrain"
ITEMS = parse(SCHEMA_PATH.read_text(), str(SCHEMA_PATH))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
           SINKLAB_MPI="0")


def _name(item):
    """The name a writer spells: the attribute's, or the path's last component (None: the root or a placeholder)."""
    name = item.attr or (item.path[-1] if item.path else None)
    return None if name is None or name.startswith("{") else name


def test_the_schema_declares_each_item_once():
    seen = {}
    for it in ITEMS:
        key = (it.kind, it.path, it.attr, it.dtype, it.writers)
        assert key not in seen, f"{SCHEMA_PATH.name}:{it.line} repeats line {seen[key]}"
        seen[key] = it.line
        if it.writers == ("none",):
            assert it.dtype == "-" and "fallback" in it.reader or "older name" in it.reader, it


def test_every_declared_item_is_written_by_its_writer():
    sources = {}
    missing = []
    for it in ITEMS:
        if it.writers == ("none",):
            continue
        for w in it.writers:
            assert (REPO_ROOT / w).is_file(), f"{SCHEMA_PATH.name}:{it.line}: no writer {w}"
            sources.setdefault(w, (REPO_ROOT / w).read_text())
        name = _name(it)
        if name is None:
            continue
        literal = re.compile(r'"(?:[^"\n]*/)?' + re.escape(name) + r'(?:/[^"\n]*)?"')
        if not any(literal.search(sources[w]) for w in it.writers):
            missing.append(f"{SCHEMA_PATH.name}:{it.line}: {it.text_path}: no \"{name}\" in {', '.join(it.writers)}")
    assert not missing, "declared, written by nobody:\n" + "\n".join(missing)


def test_every_reader_is_a_function_of_results_py():
    text = (REPO_ROOT / "analysis" / "results.py").read_text()
    for it in ITEMS:
        if it.reader.startswith("unread: "):
            assert len(it.reader) > len("unread: ") + 10, f"{SCHEMA_PATH.name}:{it.line}: unread, because?"
            continue
        first = re.match(r"[\w.]+", it.reader).group(0)
        *cls, fn = first.split(".")
        assert re.search(rf"^\s*def {fn}\(", text, re.M), f"{SCHEMA_PATH.name}:{it.line}: results.py has no {first}"
        for c in cls:
            assert re.search(rf"^class {c}\b", text, re.M), f"{SCHEMA_PATH.name}:{it.line}: results.py has no {c}"


def _schema_without(tmp_path, line_pattern):
    """A copy of the schema without the one line matching line_pattern."""
    lines = SCHEMA_PATH.read_text().splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if re.match(line_pattern, line)]
    assert len(hits) == 1, (line_pattern, hits)
    out = tmp_path / "schema_planted.tsv"
    out.write_text("".join(lines[:hits[0]] + lines[hits[0] + 1:]))
    return out


def _pretrain(corpus, out, schema):
    args = [str(PRETRAIN), "--vocab-size=64", "--d-model=16", "--n-layers=1", "--n-heads=2", "--ffn-hidden=32",
            "--context=16", f"--train-data={corpus / 'train.bin'}", f"--valid-data={corpus / 'valid.bin'}",
            "--steps=2", "--global-batch-tokens=64", "--micro-batch-rows=2", "--eval-every=2", "--eval-rows=4",
            "--probe-sequences=2", "--probe-length=8", "--checkpoint-every=2", f"--out-dir={out}", "--run-name=t"]
    return subprocess.run(args, env=dict(ENV, SINKLAB_SCHEMA_CHECK=str(schema)), capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def checked_run(corpus, tmp_path_factory):
    """A training run written under the whole schema."""
    if not PRETRAIN.exists():
        pytest.skip(f"{PRETRAIN} not built")
    out = tmp_path_factory.mktemp("schema") / "run"
    proc = _pretrain(corpus, out, SCHEMA_PATH)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out / "results.h5"


def test_planted_undeclared_write_stops_the_writer(corpus, checked_run, tmp_path):
    schema = _schema_without(tmp_path, r"column\s+/runs/\{run\}/eval/valid_loss\s")
    proc = _pretrain(corpus, tmp_path / "run", schema)
    assert proc.returncode != 0
    assert f"undeclared write: column /runs/t/eval/valid_loss f64 [1] (not in the results schema {schema})" in \
        proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "run" / "results.h5").exists() or proc.returncode != 0


def test_planted_undeclared_read_stops_the_reader(checked_run, tmp_path, monkeypatch):
    monkeypatch.setenv("SINKLAB_SCHEMA_CHECK", str(SCHEMA_PATH))
    with open_results(checked_run) as rf:  # the whole schema: every read declared
        assert rf.runs[0].eval is not None and rf.runs[0].train is not None
    schema = _schema_without(tmp_path, r"attr\s+/runs/\{run\}/eval@sink_eps\s")
    monkeypatch.setenv("SINKLAB_SCHEMA_CHECK", str(schema))
    with pytest.raises(SchemaError, match=re.escape(f"{checked_run}: undeclared read: /runs/t/eval@sink_eps")):
        open_results(checked_run)
    schema = _schema_without(tmp_path, r"column\s+/runs/\{run\}/train/lr\s")
    monkeypatch.setenv("SINKLAB_SCHEMA_CHECK", str(schema))
    with pytest.raises(SchemaError, match=re.escape(f"{checked_run}: undeclared read: /runs/t/train/lr")):
        open_results(checked_run)


def test_read_check_is_off_without_the_variable(checked_run, monkeypatch):
    monkeypatch.setenv("SINKLAB_SCHEMA_CHECK", "")
    results_schema._watched.clear()
    with open_results(checked_run) as rf:
        assert rf.runs[0].train is not None
    assert not results_schema._watched
