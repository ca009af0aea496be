"""bench/step_model.py (the step ledger's model, docs/DESIGN.md "The step ledger") on ledgers built here: the
roofline of each entry, the cut at host synchronisations, issue #53's counts and --check."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import step_model  # noqa: E402

PEAKS = {"name": "test GPU", "bf16_gemm_tflops": 100.0, "copy_gb_s": 1000.0, "dense_bf16_peak_tflops": 200.0,
         "kernel_floor_us": 2.0, "host_launch_us": 4.0, "host_sync_us": 20.0,
         "attention_tflops": {"64": [50.0, 25.0], "128": [100.0, 50.0]}}


def entry(op, scope, operands=(), flops=0.0, bytes_=0.0, converts=False, launches=1, syncs=0, kernels=None, **extra):
    return {"op": op, "scope": scope, "operands": [{"dtype": d, "shape": s} for d, s in operands], "flops": flops,
            "bytes": bytes_, "converts": converts,
            "device": {"launches": launches, "library_calls": 0, "copies": 0, "host_syncs": syncs, "allocations": 0,
                       "kernels": kernels if kernels is not None else [["k", 256]] * launches}, **extra}


def step_of(n_micro=2, chunks=3, weights_copy=True, syncs=2):
    rows = [entry("fill", "step0", bytes_=8)]  # another step, left out
    for m in range(n_micro):
        scope = f"step1/micro{m}"
        rows.append(entry("embedding_forward", scope + "/forward", operands=[("bf16", [16, 8]), ("i32", [16])]))
        rows.append(entry("linear_forward", scope + "/forward/layer0", operands=[("bf16", [16, 32])],
                          flops=1e12, bytes_=1e6))  # compute-bound: 10 ms at 100 TFLOP/s
        rows += [entry("cross_entropy", scope + "/head", bytes_=2e9) for _ in range(chunks)]  # 2 ms each
    if weights_copy:
        rows.append(entry("copy", "step1/micro0/forward/weights", operands=[("bf16", [10]), ("f32", [10])],
                          converts=True))
    rows.append(entry("copy", "step1/update", operands=[("f64", [4]), ("f64", [4])], launches=0, syncs=syncs))
    return rows


def test_each_entry_is_its_roofline_and_the_step_is_cut_at_syncs():
    r = step_model.analyse(step_of(), PEAKS)
    ops = r["ops"]
    assert ops["linear_forward"]["device_s"] == pytest.approx(2 * 1e12 / 100e12)  # compute-bound, both micro-steps
    assert ops["cross_entropy"]["device_s"] == pytest.approx(6 * 2e9 / 1000e9)   # memory-bound
    assert ops["embedding_forward"]["device_s"] == pytest.approx(2 * 2e-6)       # the kernel floor
    assert r["step"] == "step1" and r["tokens"] == 32
    # One stretch before the two syncs (device-bound), an empty one between them, one (empty) after.
    device = sum(e["device_s"] for e in ops.values())
    assert r["step_ms"] == pytest.approx(1e3 * (device + 2 * 20e-6))
    assert r["host_syncs"] == 2


def test_counts_of_issue_53():
    r = step_model.analyse(step_of(chunks=3), PEAKS)
    assert (r["weight_conversions"], r["activation_conversions"]) == (1, 0)
    assert r["head_chunks_per_micro"] == 3 and r["micro_steps"] == 2
    assert r["stream_ops_per_micro"] == 1 + 1 + 3 + 1  # the weights copy is in micro0
    assert r["step_ms"] == pytest.approx(32.0, abs=0.1) and step_model.failures(r, "60m") == []
    slow = step_model.analyse(step_of(chunks=3) + [entry("linear_backward", "step1/micro1/backward", flops=4e12)],
                              PEAKS)
    assert step_model.failures(slow, "60m") == [f"modelled step {slow['step_ms']:.1f} ms > 70.0 ms"]
    rows = step_of(chunks=5, syncs=3)
    rows.append(entry("copy", "step1/micro1/forward/layer0", operands=[("bf16", [4]), ("f32", [4])], converts=True))
    rows.append(entry("attention_forward", "step1/micro1/forward/layer0", kernels=[["convert_kernel", 64]],
                      operands=[("bf16", [1, 4, 1, 64])] * 3))
    missed = step_model.failures(step_model.analyse(rows, PEAKS), "60m")
    assert "activation_conversions 2 > 0" in missed and "host_syncs 3 > 2" in missed
    assert "head_chunks_per_micro 5 > 4" in missed


def test_local_memory_from_stack_frames_and_the_measured_column(tmp_path, capsys):
    rows = step_of()
    rows.append(entry("add", "step1/micro1/forward/layer0", bytes_=0, kernels=[["add_kernel", 1000]], seconds=0.5))
    r = step_model.analyse(rows, PEAKS, frames={"add_kernel": 336})
    assert r["ops"]["add"]["local_bytes"] == 336 * 1000
    assert r["ops"]["add"]["measured_s"] == 0.5 and r["measured_ops_ms"] == pytest.approx(500)
    path = tmp_path / "ledger.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in rows))
    assert step_model.main([str(path), "--gpu", "h200", "--check", "60m"]) == 0  # the real H200's figures: fast
    out = capsys.readouterr().out
    assert "meas/model" in out and "every limit of issue #53 for the 60m job holds" in out


def test_a_ledger_without_a_step_is_refused(tmp_path):
    path = tmp_path / "ledger.jsonl"
    path.write_text(json.dumps(entry("fill", "")) + "\n")
    with pytest.raises(SystemExit, match="no step<N> scope"):
        step_model.main([str(path)])
