"""The options sinklab-pretrain, sinklab-sft, sinklab-survey and sinklab-probe share (src/probe/shared_options.hpp):
declared once, with one default and one help text, which every one of them accepts; and --attn-kernel's one
default, auto, measures on the CPU what the survey's and the probe's old default, reference, measured (the
same bits: on the CPU auto is the reference kernel)."""
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", ROOT / "build" / "bin"))
APPS = ("sinklab-pretrain", "sinklab-sft", "sinklab-survey", "sinklab-probe")
pytestmark = pytest.mark.skipif(not all((BIN / a).exists() for a in APPS), reason=f"the binaries in {BIN} not built")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
           SINKLAB_MPI="0")
SECTION = "options sinklab-pretrain, sinklab-sft, sinklab-survey and sinklab-probe share"
# The shared options as --help prints them, each with its one default.
SHARED = {"--help": "--help ", "--config": "--config arg", "--device": "--device arg (=cpu)",
          "--attn-kernel": "--attn-kernel arg (=auto)", "--sink-eps": "--sink-eps arg (=0.2,0.3,0.4)"}


def _run(*cmd, check=True):
    proc = subprocess.run(list(map(str, cmd)), env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.mark.parametrize("app", APPS)
def test_help_prints_the_shared_set_once_with_one_default(app):
    text = _run(BIN / app, "--help").stdout
    assert text.count(SECTION) == 1, text
    section = text.split(SECTION, 1)[1]
    for flag, line in SHARED.items():
        assert text.count(f"  {flag} ") == 1, (app, flag, text)  # declared once: nowhere else in the help
        assert line in section, (app, flag, section)
    words = " ".join(text.split())  # the help's lines wrap where the terminal width says
    assert words.count("attention kernel: auto (cuDNN when the attention fits") == 1, words


def test_every_app_accepts_the_shared_set(tmp_path):
    shared = ["--device=cpu", "--attn-kernel=reference", "--sink-eps=0.25,0.5"]
    job = ROOT / "jobs" / "atlas" / "bbm_ci.ini"
    config = _run(BIN / "sinklab-pretrain", "--config", job, *shared, "--dry-run").stdout
    assert "attn-kernel = reference" in config and "sink-eps = 0.25,0.5" in config and "device = cpu" in config
    config = _run(BIN / "sinklab-pretrain", "--config", job, "--dry-run").stdout
    assert "attn-kernel = auto" in config and "sink-eps = 0.2,0.3,0.4" in config and "device = cpu" in config
    fixtures = ROOT / "jobs" / "survey" / "fixtures.ini"
    for extra, kernel in ((shared, "reference"), ([], "auto")):
        proc = _run(BIN / "sinklab-survey", "--config", fixtures, "--output", tmp_path / "s.h5", *extra, "--dry-run")
        assert f"attn-kernel = {kernel}" in proc.stdout, proc.stdout
    # sinklab-sft and sinklab-probe take the set and go on to --init-from / --checkpoint (which do not exist)
    for app, args in (("sinklab-sft", ["--init-from", tmp_path / "none", "--sft-data=x", "--valid-data=x",
                                       "--global-batch-tokens=64", "--micro-batch-rows=1"]),
                      ("sinklab-probe", ["--checkpoint", tmp_path / "none", "--out", tmp_path / "p.h5"])):
        proc = _run(BIN / app, *args, *shared, check=False)
        assert proc.returncode != 0 and "none" in proc.stderr and "--attn-kernel" not in proc.stderr, proc.stderr
    # the probe checks the set before it reads any file
    proc = _run(BIN / "sinklab-probe", "--checkpoint", tmp_path / "none", "--out", tmp_path / "p.h5",
                "--attn-kernel=fast", check=False)
    assert proc.returncode != 0 and "--attn-kernel: 'fast' is not one of" in proc.stderr, proc.stderr


def _contents(path):
    """{dataset path: array} of an HDF5 file, and {group: attributes} but the times of day."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]
            else:
                out[name + "@"] = {k: v for k, v in obj.attrs.items() if k not in ("seconds", "created_utc", "config",
                                                                                  "command_line")}
        f.visititems(visit)
    return out


def _same(a, b):
    assert sorted(a) == sorted(b) and sum(not k.endswith("@") for k in a) >= 5, sorted(a)
    for key in a:
        if key.endswith("@"):
            assert a[key].keys() == b[key].keys(), key
            for k in a[key]:
                np.testing.assert_array_equal(a[key][k], b[key][k], err_msg=f"{key}{k}")
        else:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_auto_measures_on_the_cpu_what_reference_did(corpus, tmp_path):
    """The survey and the probe with the one default (auto) against --attn-kernel reference, their default
    before: on the CPU the same bits."""
    fixtures = ROOT / "jobs" / "survey" / "fixtures.ini"
    survey = ["--config", fixtures, "--models=gpt2,llama_gqa,mistral_sliding,gemma3_text", "--n-seq=4",
              "--commit-every=0"]
    _run(BIN / "sinklab-survey", *survey, "--output", tmp_path / "auto.h5")
    _run(BIN / "sinklab-survey", *survey, "--output", tmp_path / "ref.h5", "--attn-kernel=reference")
    _same(_contents(tmp_path / "auto.h5"), _contents(tmp_path / "ref.h5"))

    _run(BIN / "sinklab-pretrain", f"--vocab-size=64", "--d-model=32", "--n-layers=2", "--n-heads=2",
         "--ffn-hidden=64", "--context=16", f"--train-data={corpus / 'train.bin'}",
         f"--valid-data={corpus / 'valid.bin'}", "--steps=2", "--global-batch-tokens=128", "--micro-batch-rows=2",
         "--probe-sequences=4", "--probe-length=8", f"--out-dir={tmp_path / 'run'}")
    probe = ["--checkpoint", tmp_path / "run", "--data", corpus / "valid.bin", "--sequences=6", "--length=12"]
    _run(BIN / "sinklab-probe", *probe, "--out", tmp_path / "pa.h5")
    _run(BIN / "sinklab-probe", *probe, "--out", tmp_path / "pr.h5", "--attn-kernel=reference")
    _same(_contents(tmp_path / "pa.h5"), _contents(tmp_path / "pr.h5"))
