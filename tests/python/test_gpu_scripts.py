"""The GPU machine's scripts, checked here without a GPU, so that a lent GPU's minutes are not spent on them:

- tests/gpu/run.sh --prebuilt over a constructed archive (env/gpu_prebuilt.sh's layout): the build's source
  root linked to the checkout when it is elsewhere, the libraries found, `ctest -L gpu` run, and the summary
  read from ctest's own lines (an all-passed run's "100% tests passed out of N", a failure's "N tests failed",
  a parameterised case's "  # GetParam() = ..." name, skips) with the exit status it implies. The first GPU
  run (2026-11-28) printed "0 gpu tests ... ? failed" and exit 1 for 190 passing tests: this is its test.
- bench/run_train_gpu.sh on the CPU (DEVICE=cpu): the random-token shards, the trainer's run, and the medians
  of its per-step tok/s and MFU lines.
"""
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("SINKLAB_BIN_DIR", ROOT / "build" / "bin"))
CUDA_LIB_DIRS = [Path("/usr/local/cuda/lib64"), Path("/usr/local/cuda/lib"), Path("/usr/lib/x86_64-linux-gnu")]
CUDA_SONAMES = ["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libcudnn.so.9", "libnccl.so.2",
                "libnvrtc.so.13"]
have_cuda_libs = all(any((d / so).exists() for d in CUDA_LIB_DIRS) for so in CUDA_SONAMES)

# (test name, command, labels): a gtest-discovered parameterised name carries its GetParam() text.
PASSING = [("CudaFake.Passes", "true"), ('Cases/CudaFake.Param/a  # GetParam() = "a"', "true")]
SKIPPING_AND_FAILING = [("CudaFake.Skips", "echo '[  SKIPPED ] no usable CUDA device'"), ("CudaFake.Fails", "false")]


def _archive(tmp_path, tests):
    """A prebuilt archive as env/gpu_prebuilt.sh packs it, its source root and build dir somewhere else."""
    stage = tmp_path / "stage" / "prebuilt"
    origin_root, origin_build = tmp_path / "elsewhere" / "src", tmp_path / "elsewhere-build"
    (stage / "build" / "bin").mkdir(parents=True)
    (stage / "lib").mkdir()
    shutil.copy("/bin/true", stage / "build" / "bin" / "sinklab-fake")
    (stage / "ORIGIN").write_text(f"{origin_root}\n{origin_build}\n{'0' * 40}\n")
    lines = []
    for name, cmd in tests:
        lines.append(f'add_test([=[{name}]=] "/bin/sh" "-c" "{cmd}")')
        lines.append(f'set_tests_properties([=[{name}]=] PROPERTIES LABELS "gpu" '
                     f'SKIP_REGULAR_EXPRESSION "\\\\[  SKIPPED \\\\]")')
    (stage / "build" / "CTestTestfile.cmake").write_text("\n".join(lines) + "\n")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    with tarfile.open(bundle / "sinklab-gpu-prebuilt.tar.xz", "w:xz") as tar:
        tar.add(stage, arcname="prebuilt")
    return bundle, origin_root, origin_build


def _run_sh(tmp_path, bundle, newer_ctest=False):
    """run.sh --prebuilt; newer_ctest: ctest's all-passed line as newer CMake writes it (the H200's, 2026-11-28:
    "100% tests passed out of 190", without "0 tests failed"), through a wrapper ahead of ctest on PATH."""
    path = "/usr/bin:/bin"  # no nvidia-smi: "none seen"
    if newer_ctest:
        wrapper = tmp_path / "newer-ctest"
        wrapper.mkdir()
        (wrapper / "ctest").write_text(f"#!/bin/bash\nset -o pipefail\n{shutil.which('ctest')} \"$@\" | "
                                       "sed 's/100% tests passed, 0 tests failed out of/100% tests passed out of/'\n")
        (wrapper / "ctest").chmod(0o755)
        path = f"{wrapper}:{path}"
    env = dict(os.environ, SINKLAB_GPU_BUNDLE=str(bundle), SINKLAB_GPU_PREBUILT_DIR=str(tmp_path / "unpacked"),
               CTEST_JOBS="2", PATH=path)
    env.pop("OUT", None)
    return subprocess.run(["bash", str(ROOT / "tests/gpu/run.sh"), "--prebuilt"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not have_cuda_libs, reason="CUDA 13's libraries are not on this machine")
@pytest.mark.parametrize("newer_ctest", [False, True], ids=["ctest-3.25-wording", "newer-ctest-wording"])
def test_run_sh_prebuilt_summarises_an_all_passed_run(tmp_path, newer_ctest):
    bundle, origin_root, origin_build = _archive(tmp_path, PASSING)
    p = _run_sh(tmp_path, bundle, newer_ctest)
    assert p.returncode == 0, p.stdout + p.stderr
    assert origin_root.is_symlink() and origin_root.resolve() == ROOT  # the binaries' paths reach this checkout
    assert f"linked {origin_root} -> {ROOT}" in p.stdout
    assert (origin_build / "gpu_ld_path").read_text().startswith(f"LD_LIBRARY_PATH={tmp_path / 'unpacked' / 'lib'}:")
    summary = (origin_build / "gpu_summary.txt").read_text()
    assert "==== 2 gpu tests: 2 passed, 0 failed, 0 skipped" in summary, summary
    assert "Passed     Cases/CudaFake.Param/a" in summary and "Passed     CudaFake.Passes" in summary, summary
    assert "(the prebuilt binaries' commit)" in summary and "tests/gpu/run.sh: ok" in p.stdout


@pytest.mark.skipif(not have_cuda_libs, reason="CUDA 13's libraries are not on this machine")
def test_run_sh_prebuilt_fails_on_a_failed_test(tmp_path):
    bundle, _, origin_build = _archive(tmp_path, PASSING + SKIPPING_AND_FAILING)
    p = _run_sh(tmp_path, bundle)
    assert p.returncode == 1, p.stdout + p.stderr
    summary = (origin_build / "gpu_summary.txt").read_text()
    assert "==== 4 gpu tests: 2 passed, 1 failed, 1 skipped" in summary, summary
    assert "Skipped    CudaFake.Skips" in summary and "Failed     CudaFake.Fails" in summary, summary
    assert "FAILED: gpu tests" in p.stdout


def test_run_sh_prebuilt_without_an_archive_says_so(tmp_path):
    env = dict(os.environ, SINKLAB_GPU_BUNDLE=str(tmp_path))
    p = subprocess.run(["bash", str(ROOT / "tests/gpu/run.sh"), "--prebuilt"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2
    assert f"no prebuilt archive at {tmp_path}/sinklab-gpu-prebuilt.tar.xz" in p.stdout


@pytest.mark.skipif(not (BIN / "sinklab-pretrain").exists(), reason="sinklab-pretrain not built")
def test_run_train_gpu_on_the_cpu(tmp_path):
    config = tmp_path / "tiny.ini"
    config.write_text("vocab-size = 256\nd-model = 32\nn-layers = 2\nn-heads = 4\nffn-hidden = 64\ncontext = 64\n"
                      "micro-batch-rows = 2\nsteps = 10\nglobal-batch-tokens = 256\nlr = 1e-3\nseed = 1\n"
                      "train-data = x\nvalid-data = x\nout-dir = x\n")
    env = dict(os.environ, DEVICE="cpu", PRECISION="fp32", PEER="0", PRETRAIN_ARGS="--peak-tflops 1",
               OMP_NUM_THREADS="1", PYTHON=str(Path(os.sys.executable)))
    p = subprocess.run(["bash", str(ROOT / "bench/run_train_gpu.sh"), str(BIN.parent), str(config), "9", "256"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 rows x 64 per micro-step, 2 micro-steps, 256 tokens per step, 9 steps" in p.stdout
    steps = [ln for ln in p.stdout.splitlines() if ln.startswith("step ")]
    assert len(steps) == 9 and all("| MFU " in ln for ln in steps), p.stdout  # --log-every 1, MFU from the peak
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("sinklab tokens_per_s ") and last.endswith("(median of 6 steps after the first 3)"), last
    tok_s = sorted(float(ln.split(" tok/s")[0].rsplit("| ", 1)[1]) for ln in steps[3:])
    assert float(last.split()[2]) == pytest.approx(tok_s[2], abs=1)  # the lower median of steps 4-9, as logged
