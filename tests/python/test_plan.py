"""analysis.plan (sizing job files on paper, from `sinklab-pretrain --describe`) against figures worked out by
hand here from the numbers of jobs/pretrain/60m_default.ini and 1b_default.ini, not from the module's code:
FLOPs per token, tokens, memory per rank, GPU-hours at an MFU (given and read from a results file) and the
all-reduce's traffic; and against its rows from before it read the binary (tests/fixtures/plan). Also: a
folder prints one row per job file and the total; a bad path, a missing binary, a job the binary refuses are
one error line and a non-zero exit; analysis/pretrain_defaults.json is what the binary says today."""
import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from analysis import describe, plan
from analysis.results import ini_settings

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs" / "pretrain"
GOLDEN = ROOT / "tests" / "fixtures" / "plan"
PRETRAIN = describe.pretrain_binary()
pytestmark = pytest.mark.skipif(not PRETRAIN.is_file(), reason=f"{PRETRAIN} not built (set SINKLAB_BIN_DIR)")
GIB = 2 ** 30
PEAK = 989.4e12  # H100 bf16 dense, the default --peak-tflops


def run_plan(capsys, *args):
    rc = plan.main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out.splitlines(), out.err


def cells(lines, name):
    """The row of the job named `name` as {column: text}."""
    header = ["job", "dev", "ranks", "GFLOP/tok", "tokens", "state", "Z1", "acts", "acts_attn", "acts_block", "need", "MFU",
              "GPU-h", "step", "NCCL", "comm"]
    (line,) = [ln for ln in lines[1:] if ln.split()[0].endswith(name)]
    return dict(zip(header, line.split()))


def test_the_job_files_say_what_the_hand_figures_assume():
    s60 = ini_settings((JOBS / "60m_default.ini").read_text())
    s1b = ini_settings((JOBS / "1b_default.ini").read_text())
    assert [s60[k] for k in ("vocab-size", "d-model", "n-layers", "n-heads", "ffn-hidden", "context", "steps",
                             "global-batch-tokens", "micro-batch-rows")] == \
        ["50432", "768", "10", "8", "1536", "2048", "20000", "1048576", "8"]
    assert "ffn" not in s60 and "zero1" not in s60  # SwiGLU (3 FFN matrices), no ZeRO-1
    assert "#SBATCH --nodes=1 --gpus-per-node=1" in (JOBS / "60m_default.ini").read_text()
    assert [s1b[k] for k in ("vocab-size", "d-model", "n-layers", "n-heads", "ffn-hidden", "context", "steps",
                             "global-batch-tokens", "micro-batch-rows", "zero1")] == \
        ["50432", "2048", "22", "16", "5632", "2048", "40000", "1048576", "4", "true"]
    assert "#SBATCH --nodes=4 --gpus-per-node=8" in (JOBS / "1b_default.ini").read_text()


# 60M: V 50432, d 768, L 10, H 8 (d_head 96), F 1536, T 2048, SwiGLU; 1 GPU.
#   per layer: 2 RMSNorm gains 2*768 + q,k,v,o 4*768^2 + gate,up,down 3*1536*768
#            = 1,536 + 2,359,296 + 3,538,944 = 5,899,776;  x 10 = 58,997,760
#   final norm 768, lm_head 50432*768 = 38,731,776; embed_tokens 38,731,776 (not multiplied)
#   multiplied: 58,997,760 + 768 + 38,731,776 = 97,730,304;  all: + 38,731,776 = 136,462,080
#   FLOPs/token = 6 * 97,730,304 + 12 * 10 * 8 * 96 * 2048 = 586,381,824 + 188,743,680 = 775,125,504
#   tokens = 20,000 * 1,048,576 = 20,971,520,000
#   GPU-h at MFU 0.4: 775,125,504 * 20,971,520,000 / (0.4 * 989.4e12) / 3600 = 11.41
N60 = 136_462_080
FPT60 = 775_125_504
TOK60 = 20_000 * 1_048_576
# Activations, 8 rows x 2048 = 16,384 rows, in bf16 (--precision bf16, the cuda default: 2 bytes) but the
# statistics, losses and learned-tensor gradients (f32); every tensor's bytes here are multiples of 64:
#   per layer x_in, xn1, qkv (3d), att (d), x_mid, xn2 = 8 * 768; ffn_in (gate|up) 2 * 1536 + ffn_h 1536
#   (bf16: 10,752 a row); rstd1, rstd2 = 2 and stats [8, H, 2048] = 16,384 * 8 (f32: 10 a row)
#   rest: x_final_in, xf, tmp, d_res, d_tmp, d_xn, d_attn_in, d_xf, d_att (d), d_qkv (3d) = 12 * 768;
#   d_ffn_in + d_ffn_h = 3 * 1536 (bf16: 13,824 a row); rstdf, losses (f32: 2 a row)
#   logits chunk (model::head_chunk_rows): 16,384 x 50,432 bf16 logits are 1.54 GiB, 2 chunks of 8,192 rows;
#   d_sinks 8 and d_relative 8*32 f32, each rounded up to 64 bytes: 64 + 1,024
ACTS60 = 10 * 16_384 * (10_752 * 2 + 10 * 4) + 16_384 * (13_824 * 2 + 2 * 4) + 8_192 * 50_432 * 2 + 64 + 1_024
# --recompute attention: xn1, qkv, att (5d bf16) and rstd1, stats (9 f32) a row held once, not per layer;
# --recompute block: only x_in (d) per layer, the other 7d + 3F bf16 and 10 f32 once.
REST60 = 16_384 * (13_824 * 2 + 2 * 4) + 8_192 * 50_432 * 2 + 64 + 1_024
ACTS60_ATTN = (10 * 16_384 * ((3 * 768 + 3 * 1536) * 2 + 4) + 16_384 * (5 * 768 * 2 + 9 * 4) + REST60)
ACTS60_BLOCK = 10 * 16_384 * 768 * 2 + 16_384 * ((7 * 768 + 3 * 1536) * 2 + 10 * 4) + REST60

# 1B: V 50432, d 2048, L 22, H 16 (d_head 128), F 5632, T 2048, SwiGLU, ZeRO-1; 4 nodes x 8 GPUs = 32 ranks.
#   per layer: 2*2048 + 4*2048^2 + 3*5632*2048 = 4,096 + 16,777,216 + 34,603,008 = 51,384,320; x 22
#            = 1,130,455,040;  + final norm 2048 + lm_head 50432*2048 = 103,284,736
#   multiplied: 1,233,741,824;  all: + embed 103,284,736 = 1,337,026,560
#   FLOPs/token = 6 * 1,233,741,824 + 12 * 22 * 16 * 128 * 2048 = 7,402,450,944 + 1,107,296,256 = 8,509,747,200
#   tokens = 40,000 * 1,048,576;  GPU-h at 0.4 = 250.5
N1B = 1_337_026_560
FPT1B = 8_509_747_200
TOK1B = 40_000 * 1_048_576
# Activations, 4 rows x 2048 = 8,192 rows, bf16 as above: per layer 8,192 * (8 * 2048 + 3 * 5632) bf16 and
# 8,192 * (2 + 16) f32; rest 8,192 * (12 * 2048 + 3 * 5632) bf16 and 8,192 * 2 f32; logits 8,192 x 50,432
# bf16 (0.77 GiB: one chunk); d_sinks 16 floats (64 B), d_relative 16*32 (2 KiB)
ACTS1B = 22 * 8_192 * (33_280 * 2 + 18 * 4) + 8_192 * (41_472 * 2 + 2 * 4) + 8_192 * 50_432 * 2 + 64 + 2_048
REST1B = 8_192 * (41_472 * 2 + 2 * 4) + 8_192 * 50_432 * 2 + 64 + 2_048
ACTS1B_ATTN = 22 * 8_192 * ((3 * 2048 + 3 * 5632) * 2 + 4) + 8_192 * (5 * 2048 * 2 + 17 * 4) + REST1B
ACTS1B_BLOCK = 22 * 8_192 * 2048 * 2 + 8_192 * ((7 * 2048 + 3 * 5632) * 2 + 18 * 4) + REST1B


def test_60m_and_1b_by_hand(capsys):
    assert 6 * (10 * (2 * 768 + 4 * 768 ** 2 + 3 * 1536 * 768) + 768 + 50432 * 768) + 12 * 10 * 8 * 96 * 2048 == FPT60
    assert 6 * (22 * (2 * 2048 + 4 * 2048 ** 2 + 3 * 5632 * 2048) + 2048 + 50432 * 2048) \
        + 12 * 22 * 16 * 128 * 2048 == FPT1B
    rc, lines, _ = run_plan(capsys, JOBS / "60m_default.ini", JOBS / "1b_default.ini")
    assert rc == 0
    r60, r1b = cells(lines, "60m_default.ini"), cells(lines, "1b_default.ini")

    hours60 = FPT60 * TOK60 / (0.4 * PEAK) / 3600
    assert (r60["dev"], r60["ranks"], r60["GFLOP/tok"], r60["tokens"]) == ("cuda", "1", "0.775", "21B")
    assert float(r60["GPU-h"]) == pytest.approx(11.4) and round(hours60, 1) == 11.4
    assert float(r60["state"]) == pytest.approx(16 * N60 / GIB, abs=0.005)  # 2.03: f32 w + g + AdamW m, v
    assert float(r60["Z1"]) == float(r60["state"])  # one rank: nothing to shard
    assert float(r60["acts"]) == pytest.approx(ACTS60 / GIB, abs=0.005)  # 4.48
    assert float(r60["acts_attn"]) == pytest.approx(ACTS60_ATTN / GIB, abs=0.005)  # 3.42
    assert float(r60["acts_block"]) == pytest.approx(ACTS60_BLOCK / GIB, abs=0.005)  # 1.73
    assert float(r60["need"]) == pytest.approx((16 * N60 + ACTS60) / GIB, abs=0.005)  # 6.51
    assert float(r60["step"]) == pytest.approx(FPT60 * 1_048_576 / (0.4 * PEAK), abs=0.0005)  # 2.054 s
    assert (r60["NCCL"], r60["comm"]) == ("0.00", "-")  # one rank: no all-reduce

    hours1b = FPT1B * TOK1B / (0.4 * PEAK) / 3600
    assert (r1b["dev"], r1b["ranks"], r1b["GFLOP/tok"], r1b["tokens"]) == ("cuda", "32", "8.510", "41.9B")
    assert float(r1b["GPU-h"]) == pytest.approx(hours1b, abs=0.05) and round(hours1b, 1) == 250.5
    assert float(r1b["state"]) == pytest.approx(16 * N1B / GIB, abs=0.005)  # 19.92
    assert float(r1b["Z1"]) == pytest.approx((8 * N1B + 8 * N1B / 32) / GIB, abs=0.005)  # 10.27
    assert float(r1b["acts"]) == pytest.approx(ACTS1B / GIB, abs=0.005)  # 12.59
    assert float(r1b["acts_attn"]) == pytest.approx(ACTS1B_ATTN / GIB, abs=0.005)  # 9.29
    assert float(r1b["acts_block"]) == pytest.approx(ACTS1B_BLOCK / GIB, abs=0.005)  # 2.57
    assert r1b["need"] == f"{(8 * N1B + 8 * N1B / 32 + ACTS1B) / GIB:.2f}z"  # 22.86, ZeRO-1 as the job runs
    assert float(r1b["step"]) == pytest.approx(FPT1B * 1_048_576 / (32 * 0.4 * PEAK), abs=0.0005)  # 0.705 s
    ring = 2 * 31 / 32 * 4 * N1B  # bytes each rank sends in a ring all-reduce of the f32 gradients
    assert float(r1b["NCCL"]) == pytest.approx(ring / GIB, abs=0.005)  # 9.65
    assert float(r1b["comm"]) == pytest.approx(ring / (400e9 / 8), abs=0.0005)  # 0.207 s at 400 Gb/s
    assert lines[-1].startswith(f"total: 2 job files, {round(hours60 + hours1b, 1):,} GPU-hours")


def test_mfu_peak_and_link_flags(capsys, tmp_path):
    rc, lines, _ = run_plan(capsys, JOBS / "1b_default.ini", "--mfu", "0.5", "--peak-tflops", "500",
                            "--link-gbps", "100")
    r = cells(lines, "1b_default.ini")
    assert rc == 0 and r["MFU"] == "0.50"
    assert float(r["GPU-h"]) == pytest.approx(FPT1B * TOK1B / (0.5 * 500e12) / 3600, abs=0.05)
    assert float(r["comm"]) == pytest.approx(2 * 31 / 32 * 4 * N1B / (100e9 / 8), abs=0.0005)

    # --from-results: the median of /runs/<the job's run-name>/train/mfu, marked *; others keep --mfu.
    h5 = tmp_path / "results.h5"
    with h5py.File(h5, "w") as f:
        f["runs/60m_default/train/step"] = np.arange(5)
        f["runs/60m_default/train/mfu"] = np.array([np.nan, 0.3, 0.5, 0.55, 0.9])  # median of the finite: 0.525
    rc, lines, _ = run_plan(capsys, JOBS / "60m_default.ini", JOBS / "1b_default.ini", "--from-results", h5)
    r60, r1b = cells(lines, "60m_default.ini"), cells(lines, "1b_default.ini")
    assert rc == 0 and r60["MFU"] == "0.53*" and r1b["MFU"] == "0.40"
    assert float(r60["GPU-h"]) == pytest.approx(FPT60 * TOK60 / (0.525 * PEAK) / 3600, abs=0.05)  # 8.7


def test_a_folder_prints_one_row_per_job_file_and_the_total(capsys):
    files = sorted(p.relative_to(JOBS).as_posix() for p in JOBS.rglob("*.ini"))
    rc, lines, err = run_plan(capsys, JOBS)
    assert rc == 0 and err == ""
    assert [ln.split()[0] for ln in lines[1:-1]] == files
    gpu_hours = [float(ln.split()[12]) for ln in lines[1:-1] if ln.split()[1] == "cuda"]
    total = lines[-1].split()
    assert lines[-1].startswith(f"total: {len(files)} job files, ")
    assert lines[-1].endswith(f" GPU-hours ({len(gpu_hours)} GPU jobs) at 989.4 TFLOP/s peak per GPU")
    assert float(total[4].replace(",", "")) == pytest.approx(sum(gpu_hours), abs=0.05 * len(gpu_hours))  # rows rounded


@pytest.mark.parametrize("arg", ["jobs/pretrain/no_such.ini", "jobs/no_such_folder"])
def test_a_bad_path_is_one_error_line(arg):
    sub = subprocess.run([sys.executable, "-m", "analysis.plan", arg], cwd=ROOT, capture_output=True, text=True)
    assert sub.returncode != 0 and sub.stdout == ""
    assert sub.stderr == f"analysis.plan: error: {arg}: no such job file or folder\n"


def test_a_file_that_is_not_a_job_is_refused(capsys, tmp_path):
    # The binary's own check, as one line naming the file and what is missing.
    bad = tmp_path / "x.ini"
    bad.write_text("d-model = 64\n")
    rc, lines, err = run_plan(capsys, bad)
    assert rc != 0 and lines == [] and err.count("\n") == 1
    assert err.startswith(f"analysis.plan: error: {bad}: sinklab-pretrain: error: ") and "required" in err, err


def test_the_rows_are_those_of_the_python_mirror(capsys):
    # The rows analysis.plan printed when it rebuilt the layout, the defaults and the activation buffer in
    # Python (tests/fixtures/plan/README.md): the binary's description gives the same, to the printed digit.
    rc, lines, _ = run_plan(capsys, "jobs/pretrain/60m_default.ini", "jobs/pretrain/1b_default.ini")
    assert rc == 0 and lines == (GOLDEN / "60m_1b_default.txt").read_text().splitlines()
    # Every job file of then, compared cell by cell (a job file added since adds a row and changes the total).
    rc, lines, _ = run_plan(capsys, JOBS)
    rows = {ln.split()[0]: ln.split() for ln in lines[1:-1]}
    golden = (GOLDEN / "jobs_pretrain.txt").read_text().splitlines()
    assert rc == 0 and lines[0].split() == golden[0].split()
    for line in golden[1:-1]:
        assert rows.get(line.split()[0]) == line.split(), line
    if len(rows) == len(golden) - 2:
        assert lines[-1] == golden[-1]


def test_a_missing_binary_is_one_line_naming_it(tmp_path):
    env = {**os.environ, "SINKLAB_BIN_DIR": str(tmp_path)}
    sub = subprocess.run([sys.executable, "-m", "analysis.plan", "jobs/pretrain/60m_default.ini"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert sub.returncode != 0 and sub.stdout == ""
    assert sub.stderr == (f"analysis.plan: error: {tmp_path / 'sinklab-pretrain'}: no such binary (build the "
                          "sinklab-pretrain target, or set SINKLAB_BIN_DIR)\n")


def test_describe_counts_what_the_layout_holds():
    # --describe's counts are sums over its own parameter layout, and the activation totals are their parts.
    d = describe.describe(JOBS / "1b_default.ini")
    numel = {p["name"]: p["numel"] for p in d["params"]}
    assert all(p["numel"] == int(np.prod(p["shape"])) for p in d["params"])
    assert d["n_params"] == sum(numel.values()) == N1B
    assert d["n_params_non_embedding"] == N1B - numel["model.embed_tokens.weight"] - numel["lm_head.weight"]
    assert d["flops_per_token"] == FPT1B
    for mode, acts in d["activation_bytes"].items():
        assert acts["total"] == 22 * acts["per_layer"] + acts["recomputed"] + acts["rest"], mode
    assert d["activation_bytes"]["none"]["total"] == ACTS1B and d["activation_bytes"]["block"]["total"] == ACTS1B_BLOCK
    assert d["axes"]["attn-sim"] == "exp" and d["settings"]["zero1"] == "true"


def test_the_committed_defaults_are_the_binarys():
    # analysis/pretrain_defaults.json (read by the report's labels, compare and bbm without a build) is the
    # --describe of a job giving only the required options: regenerated here through the binary.
    committed = json.loads(describe.DEFAULTS_FILE.read_text())["defaults"]
    assert describe.defaults_from_binary() == committed == describe.DEFAULTS
