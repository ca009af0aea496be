"""What sinklab-pretrain builds and holds for a job, from the binary itself (`--describe`, train/describe.hpp):
the parameter layout, n_params, FLOPs per token, the activation bytes of one micro-batch under each --recompute
mode and every setting with its value. analysis.plan sizes job files from it; nothing here mirrors the C++.

The trainer's defaults (every option a job file may leave out, the model's variant axes among them) are
pretrain_defaults.json beside this file: the --describe of a job that gives only the required options,
committed so that the report reads them without a build. Regenerate it after changing a default:

    python -m analysis.describe --write-defaults     # through $SINKLAB_BIN_DIR/sinklab-pretrain (or build/bin)

(tests/python/test_plan.py regenerates it through the binary and compares.)
"""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULTS_FILE = Path(__file__).with_name("pretrain_defaults.json")
# The options sinklab-pretrain requires, with small values: the job whose other settings are the defaults.
REQUIRED_JOB = {"vocab-size": "64", "d-model": "16", "n-layers": "1", "n-heads": "2", "ffn-hidden": "32",
                "context": "64", "train-data": "train.bin", "valid-data": "valid.bin", "steps": "1",
                "global-batch-tokens": "64", "micro-batch-rows": "1"}


class DescribeError(Exception):
    """No binary, or a job it refuses; str() is one line naming the binary or the job."""


def pretrain_binary():
    """$SINKLAB_BIN_DIR/sinklab-pretrain, or build/bin/sinklab-pretrain of this checkout."""
    return Path(os.environ.get("SINKLAB_BIN_DIR") or REPO / "build" / "bin") / "sinklab-pretrain"


def describe(job_file=None, flags=(), name=None):
    """The --describe JSON of a job file (and flags over it) as a dict. `name` labels its errors (default: the
    file)."""
    binary = pretrain_binary()
    if not binary.is_file():
        raise DescribeError(f"{binary}: no such binary (build the sinklab-pretrain target, or set SINKLAB_BIN_DIR)")
    cmd = [str(binary), *([f"--config={job_file}"] if job_file is not None else []), "--describe", *flags]
    env = {**os.environ, "SINKLAB_MPI": "0"}  # one process, no MPI start-up (as slurm/common.sh's --dry-run)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"]
        raise DescribeError(f"{name or job_file or binary}: {lines[-1]}")
    return json.loads(proc.stdout)


def defaults_from_binary():
    """{option: default text} of every option the required job leaves out, from --describe."""
    out = describe(flags=[f"--{k}={v}" for k, v in REQUIRED_JOB.items()])
    settings = {k: v for k, v in out["settings"].items() if k not in REQUIRED_JOB}
    mismatched = {k: v for k, v in out["axis_defaults"].items() if settings.get(k) != v}
    if mismatched:  # an axis whose option default is not ModelConfig{}'s: a bug in train_config.cpp
        raise DescribeError(f"{pretrain_binary()}: option defaults differ from ModelConfig{{}}'s axes: {mismatched}")
    return settings


def read_defaults():
    """The committed defaults, {option: text}."""
    return json.loads(DEFAULTS_FILE.read_text())["defaults"]


DEFAULTS = read_defaults()


def main(argv):
    if argv != ["--write-defaults"]:
        print("usage: python -m analysis.describe --write-defaults", file=sys.stderr)
        return 2
    try:
        defaults = defaults_from_binary()
    except DescribeError as e:
        print(f"analysis.describe: error: {e}", file=sys.stderr)
        return 2
    text = json.dumps({"made_by": "python -m analysis.describe --write-defaults (sinklab-pretrain --describe)",
                       "defaults": defaults}, indent=1, sort_keys=True) + "\n"
    tmp = DEFAULTS_FILE.with_suffix(".json.tmp")
    tmp.write_text(text)
    tmp.replace(DEFAULTS_FILE)  # atomically
    print(f"wrote {DEFAULTS_FILE} ({len(defaults)} options)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
