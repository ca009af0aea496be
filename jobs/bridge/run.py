"""From the toy to text on one machine: every cell x seed of cells/bridge.py, each trained to its scale's
token budget, evaluated and probed at a log-spaced grid of tokens seen.

    python -m jobs.bridge.run --scale mini --seeds 3 --out results/bridge
    python -m jobs.bridge.run --scale mini --seeds 3 --out results/bridge --plan     # job files and the size
    python -m jobs.bridge.run --scale mini --seeds 3 --cells d32_bos_lr2e-3,d32_packed_lr2e-3
    python -m analysis.report results/bridge -o report/bridge      # its section "From the toy to text"

Run k of cell c is <out>/<scale>/<c>/seed<k>/: job.ini (the scale's base file, the cell's settings, --seed k,
steps = the budget), sinklab-pretrain's out-dir (results.h5 with the run bridge.<scale>.<c>.s<k>,
checkpoints/), train.log, and once the budget is reached bridge_status.json {"stopped": "budget", "steps",
"tokens", "grid", ...}. The runner is the emergence atlas's (jobs/atlas/run.py: resumable, items isolated,
several at once, progress with an ETA); what differs is when a chunk ends and when a run stops: each chunk
ends at the next step of GRID (tokens seen at 2^(k/2) steps of the base file's batch, from GRID_FIRST_STEP to
the budget; the trainer evaluates and checkpoints at a chunk's end), and a run stops at the budget, never
before: there is no convergence on real text at these sizes to wait for, and the question is when, in tokens,
a sink appears. The seed seeds both the initial weights and the data order.
"""
import argparse
import math
import sys
from pathlib import Path

from analysis.results import ini_settings
from cells.bridge import CELL_BY_NAME, CELLS, CI_CELL, SCALES
from jobs.atlas.run import (Item, Runner, _hms, add_runner_options, ini_text, run_main, runner_items,
                            write_atomically)

GRID_FIRST_STEP = 4
STATUS_FILE = "bridge_status.json"
# Training tokens per second of one run with one thread, two runs at once, by size: --plan's estimate until
# finished runs are there to measure (AMD EPYC Zen 3, 2026-11-28, bench_train_step at the mini scale's shape,
# two other trainers running).
TOKENS_PER_SECOND = {"d128": 6400.0, "d64": 16000.0, "d32": 30000.0}


class BridgeItem(Item):
    prefix = "bridge"


def items_of(cells, seeds):
    """Every (cell, seed), seed by seed: a partial set has every cell."""
    return [BridgeItem(c, k) for k in range(1, seeds + 1) for c in cells]


def batch_tokens(scale):
    return int(float(ini_settings(Path(SCALES[scale][0]).read_text())["global-batch-tokens"]))


def budget_steps(scale):
    """Steps of the scale's token budget (the budget is a whole number of batches)."""
    return max(1, SCALES[scale][1] // batch_tokens(scale))


def grid(last):
    """The steps at which a run is evaluated: round(2^(k/2)) from GRID_FIRST_STEP up to `last`, and `last`."""
    steps, k = [], 2 * int(math.log2(GRID_FIRST_STEP))
    while (s := int(round(2 ** (k / 2)))) < last:
        if not steps or s > steps[-1]:
            steps.append(s)
        k += 1
    return steps + [last]


def job_text(scale, item, run_dir, steps, data=None):
    """The run's job file: the scale's base settings, then the cell's and the run's own."""
    own = {**item.cell.settings, "seed": str(item.seed), "steps": str(steps), "out-dir": str(run_dir),
           "run-name": item.run_name(scale), "checkpoint-every": str(steps)}
    if data:
        own.update({"train-data": str(Path(data) / "train.bin"), "valid-data": str(Path(data) / "valid.bin")})
    return ini_text(f"From the toy to text, scale {scale}: {item.cell.label}, seed {item.seed}.",
                    Path(SCALES[scale][0]), ("python -m jobs.bridge.run", "cells/bridge.py"), own)


class BridgeRunner(Runner):
    """The atlas's runner with the bridge's chunks (GRID) and stop (the budget)."""
    tag = "bridge"
    status_name = STATUS_FILE

    def __init__(self, args):
        super().__init__(args)
        self.steps = budget_steps(args.scale)
        self.grid = grid(self.steps)
        self.batch = batch_tokens(args.scale)  # read once, not at every chunk's end

    def job_text(self, item, run_dir):
        return job_text(self.scale, item, run_dir, self.steps, self.args.data)

    def next_target(self, done):
        return next((s for s in self.grid if s > done), max(done, self.steps))

    def judge(self, run_dir, item, target):
        if target < self.steps:
            return None
        return {"stopped": "budget", "steps": target, "tokens": target * self.batch,
                "budget_tokens": SCALES[self.scale][1], "grid": self.grid,
                "rule": f"trained to the budget of {SCALES[self.scale][1]:,} tokens, evaluated at steps "
                        f"{', '.join(map(str, self.grid))}"}

    def summary(self, status):
        return f"{status['stopped']} at step {status['steps']} ({status['tokens']:,} tokens)"


def plan(args, items):
    """Writes every run's job file and prints the set's size: tokens, and time at measured or assumed rates."""
    import json

    steps = budget_steps(args.scale)
    tokens = steps * batch_tokens(args.scale)
    measured, left = {}, {}
    for it in items:
        run_dir = it.run_dir(args.out, args.scale)
        run_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(run_dir / "job.ini", job_text(args.scale, it, run_dir, steps, args.data))
        status = run_dir / STATUS_FILE
        if status.exists():
            s = json.loads(status.read_text())
            if s.get("seconds"):
                measured.setdefault(it.cell.size, []).append(s["tokens"] / s["seconds"])
        else:
            left[it.cell.size] = left.get(it.cell.size, 0) + 1
    seconds = 0.0
    for size, n in left.items():
        rate = sum(measured[size]) / len(measured[size]) if size in measured else TOKENS_PER_SECOND.get(size, 6400.0)
        seconds += n * tokens / rate
    print(f"bridge plan: scale {args.scale}, {len({it.cell.name for it in items})} cells x {args.seeds} seeds = "
          f"{len(items)} runs ({len(items) - sum(left.values())} finished), {steps} steps = {tokens:,} tokens a run, "
          f"evaluated at steps {', '.join(map(str, grid(steps)))}")
    print(f"bridge plan: {sum(left.values())} runs to go ~ {_hms(seconds / args.parallel)} with --parallel "
          f"{args.parallel} at {'measured' if measured else 'assumed'} tokens/s per run")
    return 0


def parse(argv):
    ap = argparse.ArgumentParser(prog="python -m jobs.bridge.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=sorted(SCALES), default="mini")
    ap.add_argument("--seeds", type=int, default=3, help="seeds 1..N of every cell (default 3)")
    ap.add_argument("--out", default="results/bridge", help="runs go to OUT/SCALE/CELL/seedK (default results/bridge)")
    ap.add_argument("--cells", default="", help="comma-separated cell names (default: every cell; scale ci: "
                                                f"{CI_CELL})")
    ap.add_argument("--data", default=None, help="a folder with train.bin and valid.bin in place of data/mini")
    ap.add_argument("--plan", action="store_true", help="write the job files and print the set's size; no training")
    add_runner_options(ap)
    args = ap.parse_args(argv)
    items = runner_items(ap, args, (), CELL_BY_NAME, [CELL_BY_NAME[CI_CELL]] if args.scale == "ci" else CELLS,
                         items_of, "the set")
    if args.data and not all((Path(args.data) / f).is_file() for f in ("train.bin", "valid.bin")):
        ap.error(f"--data {args.data}: no train.bin and valid.bin there")
    return args, items


def main(argv):
    args, items = parse(argv)
    runner = BridgeRunner(args)
    return run_main(args, items, runner, plan, f"each to {runner.steps} steps ({SCALES[args.scale][1]:,} tokens), "
                    f"evaluated at steps {', '.join(map(str, runner.grid))}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
