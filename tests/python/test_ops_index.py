"""src/backend/OPS.md, the generated index of the ops (tests/python/ops_index.py), is current: red when an
op is added, moved or renamed without `python tests/python/ops_index.py --write`."""
import shutil

from ops_index import INDEX, OP_LIST, ROOT, ops_of, render


def test_committed_index_is_current():
    committed = (ROOT / INDEX).read_text(encoding="utf-8")
    assert committed == render(), f"{INDEX} is stale: run python tests/python/ops_index.py --write"


def test_index_names_every_op_and_finds_every_kernel():
    text = render()
    ops = ops_of((ROOT / OP_LIST).read_text(encoding="utf-8"))
    assert len(ops) >= 30, f"read only {len(ops)} ops from {OP_LIST}: has its form changed?"
    for _, name in ops:
        assert f"| `ops::{name}` | src/backend/ops.hpp:" in text, name
    assert "MISSING" not in text, [line for line in text.splitlines() if "MISSING" in line]
    assert "| `ops::attention_forward` | src/backend/ops.hpp:" in text
    assert "src/backend/cpu/attention.cpp:" in text and "src/backend/cuda/attention.cu:" in text


def test_an_op_added_without_regenerating_turns_it_red(tmp_path):
    backend = tmp_path / "src" / "backend"
    shutil.copytree(ROOT / "src" / "backend", backend)
    op_list = backend / "op_list.hpp"
    text = op_list.read_text(encoding="utf-8")
    anchor = "  OP(void, fill, (Tensor out, double value), (out, value))"
    assert anchor in text
    op_list.write_text(text.replace(anchor, anchor + "  \\\n  OP(void, planted_op, (Tensor out), (out))"),
                       encoding="utf-8")
    planted = render(tmp_path)
    assert planted != (ROOT / INDEX).read_text(encoding="utf-8")
    assert "| `ops::planted_op` | MISSING | MISSING | MISSING |" in planted
