"""The HDF5 results layout (docs/DESIGN.md, "HDF5 results"), as h5py (the analysis side) sees it.

The file is written by the C++ writer itself: `test_h5 --gtest_filter=H5Layout.WriteExample` with
SINKLAB_H5_LAYOUT_OUT=<path>. The binary is looked up in $SINKLAB_BUILD_DIR/bin (default: build/ of
this checkout); the test is skipped only when that binary does not exist.
"""

import os
import subprocess
from pathlib import Path

import pytest

h5py = pytest.importorskip("h5py")
np = pytest.importorskip("numpy")

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("SINKLAB_BUILD_DIR", REPO_ROOT / "build"))
TEST_H5 = BUILD_DIR / "bin" / "test_h5"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    if not TEST_H5.exists():
        pytest.skip(f"{TEST_H5} not built (set SINKLAB_BUILD_DIR)")
    out = tmp_path_factory.mktemp("h5") / "layout.h5"
    # The format layer's own example (columns, series, arrays, attributes), not the results schema's layout:
    # written without the schema check (src/io/results_schema.tsv).
    env = dict(os.environ, SINKLAB_H5_LAYOUT_OUT=str(out), SINKLAB_SCHEMA_CHECK="")
    proc = subprocess.run([str(TEST_H5), "--gtest_filter=H5Layout.WriteExample"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.exists(), proc.stdout
    # Only the committed file: no working copy is left behind.
    assert [p.name for p in out.parent.iterdir()] == ["layout.h5"]
    with h5py.File(out, "r") as f:
        yield f


def test_root_attributes(results):
    attrs = results.attrs
    for name in ("sinklab_version", "git_sha", "created_utc", "command_line", "config"):
        assert name in attrs, name
        assert isinstance(attrs[name], str), (name, type(attrs[name]))
    assert attrs["sinklab_version"] == "0.1.0"
    assert attrs["git_sha"] == "deadbeef"
    assert attrs["created_utc"] == "2025-01-01T00:00:00Z"
    assert attrs["command_line"].startswith("sinklab-pretrain")
    assert attrs["config"] == "[train]\nsteps = 3\n"


def test_train_columns(results):
    train = results["/runs/demo/train"]
    assert isinstance(train, h5py.Group)
    assert set(train.keys()) == {"step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s"}
    for name, ds in train.items():
        assert ds.ndim == 1 and ds.shape == (3,), name
        assert ds.maxshape == (None,), name          # extendable
        assert ds.chunks is not None, name           # chunked
        assert ds.compression == "gzip", name
    assert train["step"].dtype == np.int64
    assert train["loss"].dtype == np.float64
    np.testing.assert_array_equal(train["step"][:], [0, 1, 2])
    np.testing.assert_array_equal(train["tokens"][:], [4096, 8192, 12288])
    np.testing.assert_allclose(train["loss"][:], [5.0, 4.0, 3.0])


def test_eval_series(results):
    ev = results["/runs/demo/eval"]
    np.testing.assert_array_equal(ev["step"][:], [0, 2])
    np.testing.assert_allclose(ev["valid_loss"][:], [4.0, 3.0])
    alpha = ev["alpha"]
    assert alpha.shape == (2, 2, 3)                  # [step, L, H]
    assert alpha.maxshape == (None, 2, 3)
    assert alpha.dtype == np.float32
    assert alpha.chunks is not None and alpha.compression == "gzip"
    np.testing.assert_allclose(alpha[1].ravel(), 0.1 * (np.arange(6) + 1), rtol=1e-6)
    assert ev["sink"].shape == (2, 3)                # [step, eps]
    np.testing.assert_allclose(ev["eps"][:], [0.2, 0.3, 0.4])
    assert ev["massive_ratio"].shape == (2, 2)       # [step, L]


def test_model_arrays_and_attrs(results):
    m = results["/models/gpt2/natural/Pile-CC"]
    assert m["alpha"].shape == (2, 3, 4)             # [L, H, K]
    assert m["alpha"].chunks is not None and m["alpha"].compression == "gzip"
    np.testing.assert_allclose(m["alpha"][:], 0.25)
    assert m.attrs["n_seq"] == 100
    assert m.attrs["T"] == 64
    assert m.attrs["bos"] == "none"
    item = results["/items/0"]
    assert item.attrs["status"] == "ok"
    np.testing.assert_array_equal(item["rank"][:], [0])
