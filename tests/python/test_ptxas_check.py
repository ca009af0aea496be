"""The CUDA build's local-memory gate (src/backend/cuda/ptxas_check.py, CMakeLists.txt's CUDA compiler launcher):

- the parser on ptxas -v text as nvcc 13 prints it (entry functions, their frames and spills, a callee's
  frame that is not a kernel's, registers, shared memory);
- a planted kernel with a stack frame (a by-value array indexed at run time: what TensorRows did before the
  offset loops were unrolled) compiled through the launcher fails the compile, naming the kernel and the
  architecture, and leaves no object behind; an allow-list entry with a reason lets it through; a kernel
  without local memory passes; the per-object report and the merged report hold registers, stack, spills
  and smem per arch; a stale allow-list entry fails the merge. These compile with nvcc where it exists
  (this project's machines have CUDA 13 under /usr/local/cuda) and skip elsewhere.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "src" / "backend" / "cuda" / "ptxas_check.py"
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)

sys.path.insert(0, str(CHECK.parent))
import ptxas_check  # noqa: E402

SAMPLE = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z6planedPfi' for 'sm_90'
ptxas info    : Function properties for _Z6planedPfi
    224 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 224 bytes cumulative stack size, 2048 bytes smem, 380 bytes cmem[0]
ptxas info    : Compile time = 3.1 ms
ptxas info    : Function properties for __internal_trig_reduction_slowpathd
    40 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z5cleanPf' for 'sm_80'
ptxas info    : Function properties for _Z5cleanPf
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 360 bytes cmem[0]
"""

PLANTED_CU = r"""
struct Dims { long long extent[5]; };
// A by-value array indexed at run time: the thread copies the parameter to local memory first.
__global__ void planted_local_memory_kernel(float* out, Dims dims, int k) { out[threadIdx.x] = float(dims.extent[k]); }
__global__ void clean_kernel(float* out, Dims dims) { out[threadIdx.x] = float(dims.extent[2]); }
"""


def test_parse_reads_each_kernels_resources():
    kernels = ptxas_check.parse(SAMPLE)
    assert [(k["mangled"], k["arch"]) for k in kernels] == [("_Z6planedPfi", "sm_90"), ("_Z5cleanPf", "sm_80")]
    planted, clean = kernels
    assert (planted["registers"], planted["stack"], planted["spill_stores"], planted["spill_loads"], planted["smem"]) == \
        (40, 224, 8, 4, 2048)
    assert (clean["registers"], clean["stack"], clean["spill_stores"], clean["smem"]) == (8, 0, 0, 0)


def test_allow_list_entries_need_a_reason(tmp_path):
    allow = tmp_path / "allow.txt"
    allow.write_text("# comment\n*::kernel_a | its reason\n")
    assert ptxas_check.read_allow(str(allow)) == [("*::kernel_a", "its reason")]
    allow.write_text("*::kernel_a\n")
    with pytest.raises(SystemExit):
        ptxas_check.read_allow(str(allow))


def _compile(tmp_path, allow_text):
    src = tmp_path / "planted.cu"
    src.write_text(PLANTED_CU)
    allow = tmp_path / "allow.txt"
    allow.write_text(allow_text)
    obj = tmp_path / "planted.o"
    reports = tmp_path / "ptxas"
    cmd = [sys.executable, str(CHECK), "--allow", str(allow), "--report-dir", str(reports), "--",
           NVCC, "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
           "--ptxas-options=-v", "-c", str(src), "-o", str(obj)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    return proc, obj, reports, allow


@pytest.mark.skipif(NVCC is None, reason="no nvcc")
def test_planted_kernel_with_a_stack_frame_fails_the_compile(tmp_path):
    proc, obj, reports, _ = _compile(tmp_path, "")
    assert proc.returncode != 0, proc.stderr
    assert "planted_local_memory_kernel (sm_90)" in proc.stderr and "planted_local_memory_kernel (sm_80)" in proc.stderr
    assert "stack frame" in proc.stderr and "clean_kernel" not in proc.stderr
    assert not obj.exists(), "a failed check must not leave an object the next build takes as up to date"
    assert "ptxas info" not in proc.stderr  # the report goes to the json, not the build log


@pytest.mark.skipif(NVCC is None, reason="no nvcc")
def test_allow_list_lets_a_named_kernel_through_and_the_report_holds_every_kernel(tmp_path):
    proc, obj, reports, allow = _compile(tmp_path, "*planted_local_memory_kernel | a test's reason\n")
    assert proc.returncode == 0, proc.stderr
    assert obj.exists()
    merged = tmp_path / "ptxas_report.json"
    rc = ptxas_check.merge(str(reports), str(allow), str(merged))
    assert rc == 0
    kernels = json.loads(merged.read_text())["kernels"]
    got = {(k["kernel"], k["arch"]): k for k in kernels}
    for arch in ("sm_80", "sm_90"):
        planted, clean = got[("planted_local_memory_kernel", arch)], got[("clean_kernel", arch)]
        assert planted["stack"] > 0 and planted["allowed"] == "a test's reason"
        assert clean["stack"] == 0 and clean["spill_stores"] == 0 and clean["allowed"] is None
        assert clean["registers"] > 0 and "smem" in clean
    # An entry that matches no kernel with local memory is a stale reason: the merge fails.
    allow.write_text("*planted_local_memory_kernel | a test's reason\n*clean_kernel | stale\n")
    assert ptxas_check.merge(str(reports), str(allow), str(merged)) == 1
    # Without the entry the merge (run after every link) fails too: an object compiled under an older
    # allow-list is judged again.
    allow.write_text("")
    assert ptxas_check.merge(str(reports), str(allow), str(merged)) == 1


def test_the_cuda_build_compiles_through_the_gate():
    text = (ROOT / "CMakeLists.txt").read_text()
    assert "set(CMAKE_CUDA_COMPILER_LAUNCHER ${Python3_EXECUTABLE} ${SINKLAB_PTXAS_CHECK}" in text
    assert "--ptxas-options=-v" in text and "ptxas_report.json" in text
