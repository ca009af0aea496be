"""The bf16 training step over the emulated GPU against the CPU's (issue #53): sinklab-pretrain built over the
CUDA emulation (emu_sinklab_pretrain, --device cuda) and the CPU build's sinklab-pretrain (--device cpu) train
the same small model with every layer kind of the 60M job (pre-norm RMSNorm, RoPE, grouped-query attention on
cuDNN's path, SwiGLU, an untied head; --precision bf16, the fused ops on) from the same initial weights on
the same batches for STEPS optimizer steps of 2 micro-steps, and their logged loss and gradient norm must
agree to bf16 tolerance at every step. A second pair runs the op-by-op reference path (--fused-ops false) on
the emulated GPU: the fused ops must give what it gives.

    python tests/gpu/emu/check_training_step.py BUILD_DIR       (tests/gpu/emulate.sh runs it)

Exit status 0 when every step agrees, 1 otherwise (the table says where).
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import random_shards  # noqa: E402

STEPS = 6
# bf16 keeps 8 significant bits: one rounding is 2^-9 = 2e-3 of a value. Two backends that round the same
# values but sum in other orders differ by a few of those in a gradient's norm and less in a mean loss; the
# trajectories then drift apart slowly. Measured on the CPU emulation (Intel Xeon, AVX-512): see the table.
LOSS_TOL, GRAD_NORM_TOL = 2e-3, 2e-2
MODEL = ["--vocab-size", "512", "--d-model", "64", "--n-layers", "2", "--n-heads", "4", "--n-kv-heads", "2",
         "--ffn-hidden", "128", "--context", "64"]
TRAIN = ["--steps", str(STEPS), "--global-batch-tokens", "256", "--micro-batch-rows", "2", "--lr", "3e-3",
         "--warmup-steps", "0", "--seed", "11", "--eval-every", "0", "--eval-rows", "4", "--probe-sequences", "4",
         "--probe-length", "16", "--checkpoint-every", "0", "--log-every", "1", "--precision", "bf16"]


def run(exe, out, data, device, extra=()):
    cmd = [str(exe), *MODEL, *TRAIN, "--device", device, "--train-data", f"{data}/train.bin",
           "--valid-data", f"{data}/valid.bin", "--out-dir", str(out), "--run-name", "check", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "SINKLAB_GEMM_PROBE_N": "0"})
    if proc.returncode != 0:
        sys.exit(f"check_training_step: {exe.name} --device {device} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    with h5py.File(out / "results.h5", "r") as f:
        train = f["runs/check/train"]
        return np.asarray(train["loss"], dtype=float), np.asarray(train["grad_norm"], dtype=float)


def compare(name, ref, got):
    """Rows of (step, loss ref/got, grad norm ref/got, relative differences); True when within tolerance."""
    ok = True
    print(f"{name}:  step  loss ({'reference':>10s} {'this':>10s} rel.diff)  grad norm ({'reference':>8s} {'this':>8s} "
          f"rel.diff)")
    for i, (l0, l1, g0, g1) in enumerate(zip(ref[0], got[0], ref[1], got[1])):
        dl, dg = abs(l1 - l0) / abs(l0), abs(g1 - g0) / abs(g0)
        good = dl <= LOSS_TOL and dg <= GRAD_NORM_TOL
        ok &= good
        print(f"{'':{len(name)}s}   {i + 1:4d}  {l0:10.6f} {l1:10.6f} {dl:8.1e}   {g0:8.5f} {g1:8.5f} {dg:8.1e}"
              f"{'' if good else '  <- beyond ' + str((LOSS_TOL, GRAD_NORM_TOL))}")
    return ok and len(ref[0]) == len(got[0]) == STEPS


def main(build):
    build = Path(build)
    cpu_exe, gpu_exe = build / "bin" / "sinklab-pretrain", build / "emu" / "bin" / "emu_sinklab_pretrain"
    for exe in (cpu_exe, gpu_exe):
        if not exe.exists():
            sys.exit(f"check_training_step: {exe} not built")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        random_shards.write(tmp, 512, train_docs=64, valid_docs=8, doc_len=256, seed=3)
        cpu = run(cpu_exe, tmp / "cpu", tmp, "cpu")
        gpu = run(gpu_exe, tmp / "gpu", tmp, "cuda")
        gpu_ref = run(gpu_exe, tmp / "gpu_ref", tmp, "cuda", ["--fused-ops", "false"])
    ok = compare("emulated GPU vs CPU (bf16)", cpu, gpu)
    ok &= compare("emulated GPU: fused ops vs op by op", gpu_ref, gpu)
    print(f"check_training_step: {'every step agrees' if ok else 'FAILED'} (loss within {LOSS_TOL:g}, grad norm "
          f"within {GRAD_NORM_TOL:g}, relative)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build"))
