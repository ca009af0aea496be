"""The emergence atlas on one machine: every cell x seed of cells/atlas.py, each trained to convergence.

    python -m jobs.atlas.run --scale small --seeds 8 --out results/atlas
    python -m jobs.atlas.run --scale cheap --seeds 3 --principal --out results/atlas
    python -m jobs.atlas.run --scale small --seeds 8 --cells softmax,sigmoid --cap-steps 800 --parallel 2
    python -m jobs.atlas.run --scale small --seeds 8 --plan          # job files and the size, no training
    python -m jobs.atlas.run --scale small --seeds 8 --list          # the runs: index, cell, seed, folder
    python -m jobs.atlas.run --scale small --seeds 8 --item 17       # run 17 only (a Slurm array task)

Run k of cell c is <out>/<scale>/<c>/seed<k>/: its job file job.ini (the scale's base file, the cell's
settings, --seed k, steps = the cap), sinklab-pretrain's out-dir (results.h5, checkpoints/, DONE), the
trainer's log train.log and, once it stopped, atlas_status.json {"stopped": "converged"|"cap"|"budget", "steps",
"rule", ...} (written atomically). The seed seeds both the initial weights and the data order.

Training goes in chunks (--chunk steps; the trainer evaluates and checkpoints at each chunk's end): after
each, analysis/stats/convergence.py reads results.h5 and the run stops when it converged (its RULE), else at
--cap-steps. At the scales of BUDGET_SCALES (the paper's setting) every run trains to --cap-steps, its fixed
budget ("stopped": "budget"): a sink on k*, the sink token or the sink logit, or one still drifting, is not what
the convergence rule watches. Resumable: a run with atlas_status.json is skipped; any other resumes from its newest
checkpoint (--resume), so a killed runner loses at most --checkpoint-every steps of each run in flight.
Items are isolated: a failed run is reported with its log and the rest go on; the exit status is 1 when
any failed. Runs go seed by seed over the cells, so a partial atlas has every cell with fewer seeds.
Several at once (--parallel K, each with --threads OpenMP threads); the trainers die with the runner.
"""
import argparse
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from analysis.results import ResultsError, ini_settings
from analysis.stats import convergence
from cells.atlas import SCALES, cells_of

ROOT = Path(__file__).resolve().parents[2]
# The hard cap of steps by scale (--cap-steps overrides) and the chunk between convergence checks.
CAPS = {"cheap": 1000, "small": 1000, "ci": 60, "paper": 3000, "paper_ci": 60}
CHUNKS = {"cheap": 50, "small": 100, "ci": 20, "paper": 1000, "paper_ci": 20}
# Scales whose runs all train to the cap, a fixed budget (the issue asks >= 3000 steps in the paper's setting).
BUDGET_SCALES = {"paper", "paper_ci"}
# Seconds of one training step of one run, two runs at once with one thread each, on this project's 2-core
# machine: --plan's estimate until the out folder holds finished runs to measure
# (docs/DESIGN.md, "The emergence atlas"). small: the first full atlas (2026-11-28, 0.114 s); cheap: its 24
# principal runs (2026-11-29, 2.38 s a step over 7,450 steps).
# paper: 3000-step runs on one core of this project's 2-core Intel Xeon (AVX-512) while another job used the
# other core (2026-12-05): 3 layers 138 s (0.046 s a step), 1 layer 72 s (0.024 s); the mix of PAPER_CELLS
# (20 cells at 3 layers, 11 at 1) averages 0.038 s.
SECONDS_PER_STEP = {"cheap": 2.4, "small": 0.12, "ci": 0.1, "paper": 0.038, "paper_ci": 0.1}


def budget_rule(cap):
    """The stop of BUDGET_SCALES' runs, as their atlas_status.json says it."""
    return (f"a fixed budget: every run trained to {cap} steps, no convergence stop (a sink on k*, the sink token or "
            f"the sink logit, or a slow drift, is not what the convergence rule watches)")


@dataclass(frozen=True)
class Item:
    cell: object   # cells.Cell
    seed: int
    prefix = "atlas"  # of the run-name (analysis reads runs by it); jobs/bridge's items say "bridge"

    def run_dir(self, out, scale):
        return Path(out) / scale / self.cell.name / f"seed{self.seed}"

    def run_name(self, scale):
        return f"{self.prefix}.{scale}.{self.cell.name}.s{self.seed}"


def items_of(cells, seeds):
    """Every (cell, seed), seed by seed: a partial atlas has every cell."""
    return [Item(c, k) for k in range(1, seeds + 1) for c in cells]


def write_atomically(path, text):
    tmp = Path(f"{path}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def ini_text(title, base, tables, own):
    """A run's job file: `title`, the base file's settings, then the cell's and the run's own (`own`, which win)."""
    lines = [f"# {title}", f"# Written by {tables[0]} from {base.name} and {tables[1]}: edit those.", "",
             f"# {base.name}"]
    lines += [f"{k} = {v}" for k, v in ini_settings(base.read_text()).items() if k not in own]
    lines += ["", "# this cell and run"] + [f"{k} = {v}" for k, v in own.items()]
    return "\n".join(lines) + "\n"


def job_text(scale, item, run_dir, cap, data=None):
    """The run's job file: the scale's base settings, then the cell's and the run's own."""
    own = {**item.cell.settings, "seed": str(item.seed), "steps": str(cap), "out-dir": str(run_dir),
           "run-name": item.run_name(scale)}
    if data:
        own.update({"train-data": str(Path(data) / "train.bin"), "valid-data": str(Path(data) / "valid.bin"),
                    "bbm-meta": str(Path(data) / "bbm.json")})
    return ini_text(f"The emergence atlas, scale {scale}: {item.cell.label}, seed {item.seed}.", Path(SCALES[scale]),
                    ("python -m jobs.atlas.run", "cells/atlas.py"), own)


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: a forked child of a threaded process must not dlopen
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """In the child: SIGKILL when the runner dies (a kill -9 of it must not leave trainers writing). Linux
    ties this to the thread that started the child: a worker thread of the pool, alive until the run ends."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def steps_done(run_dir):
    """The steps the trainer's last invocation finished (its DONE file: "<N>" or "steps <N> of <target>"), 0
    when none (the trainer removes DONE when it starts)."""
    try:
        found = re.search(r"\d+", (Path(run_dir) / "DONE").read_text())
    except OSError:
        return 0
    return int(found.group()) if found else 0


def steps_reached(run_dir):
    """How far the run got: DONE's steps or its newest checkpoint's (a run killed mid-chunk has no DONE)."""
    steps = [int(m.group(1)) for c in (Path(run_dir) / "checkpoints").glob("step_*")
             if (m := re.fullmatch(r"step_(\d+)", c.name))]
    return max([steps_done(run_dir), *steps])


class Runner:
    def __init__(self, args):
        self.args, self.scale = args, args.scale
        self.binary = Path(args.bin) / "sinklab-pretrain"
        self.lock = threading.Lock()
        self.done = self.failed = 0
        self.seconds = []   # wall time of each run finished by this runner
        self.total = 0

    def train_chunk(self, run_dir, target, log):
        env = dict(os.environ, OMP_NUM_THREADS=str(self.args.threads))
        cmd = [str(self.binary), "--config", str(run_dir / "job.ini"), f"--steps={target}", "--resume"]
        with open(log, "a") as out:
            out.write(f"# atlas: {' '.join(cmd)}\n")
            out.flush()
            return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=os.getcwd(),
                                  preexec_fn=_die_with_parent).returncode

    # What a study overrides (jobs/bridge/run.py trains to a budget of tokens on a log-spaced grid): the run's
    # job file, the next step to train to, and whether to stop there; the status file's name and summary.
    tag = "atlas"
    status_name = "atlas_status.json"

    def job_text(self, item, run_dir):
        return job_text(self.scale, item, run_dir, self.args.cap_steps, self.args.data)

    def next_target(self, done):
        """The step the next chunk trains to: the next multiple of --chunk, at most the cap."""
        chunk, cap = self.args.chunk, self.args.cap_steps
        return max(done, min(cap, (done // chunk + 1) * chunk))  # a run past a lowered cap: judged as it is

    def judge(self, run_dir, item, target):
        """The run's status when it stops at `target` (converged or at the cap), else None. ResultsError when
        its results file cannot be read."""
        converged, measured = convergence.check(*convergence.read_series(run_dir / "results.h5",
                                                                         item.run_name(self.scale)))
        budget = self.scale in BUDGET_SCALES
        converged = converged and not budget
        if not (converged or target >= self.args.cap_steps):
            return None
        return {"stopped": "converged" if converged else "budget" if budget else "cap", "steps": target,
                "cap": self.args.cap_steps, "rule": budget_rule(self.args.cap_steps) if budget else convergence.RULE,
                **measured}

    def summary(self, status):
        """The runner's line about a finished run (after "<cell> seed <k>: ")."""
        return (f"{status['stopped']} at step {status['steps']}, BOS attention {status['bos_attention']:.3f}, copy "
                f"loss {status['copy_loss']:.3f}")

    def run_one(self, item):
        """Trains one run until judge() stops it; returns (status dict or None, error text or None)."""
        run_dir = item.run_dir(self.args.out, self.scale)
        status_path = run_dir / self.status_name
        if status_path.exists():
            return json.loads(status_path.read_text()), None
        run_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(run_dir / "job.ini", self.job_text(item, run_dir))
        log, start = run_dir / "train.log", time.monotonic()
        while True:
            done = steps_reached(run_dir)
            target = self.next_target(done)
            if target > done:
                rc = self.train_chunk(run_dir, target, log)
                if rc != 0:
                    return None, f"sinklab-pretrain exited with {rc} at the chunk to step {target}: see {log}"
                if steps_done(run_dir) != target:
                    return None, f"stopped before step {target} (a signal?): rerun to resume; see {log}"
            try:
                status = self.judge(run_dir, item, target)
            except ResultsError as e:
                return None, f"{e}; see {log}"
            if status is not None:
                # seconds: this runner's share of the run (a resumed run's earlier part is not counted)
                status["seconds"] = round(time.monotonic() - start, 1)
                write_atomically(status_path, json.dumps(status, indent=1) + "\n")
                return status, None

    def report(self, item, status, error, seconds):
        with self.lock:
            self.done += 1
            what = f"{item.cell.name} seed {item.seed}"
            if error:
                self.failed += 1
                print(f"{self.tag}: FAILED {what}: {error}", flush=True)
            else:
                if seconds is not None:
                    self.seconds.append(seconds)
                print(f"{self.tag}: {what}: {'already finished: ' if seconds is None else ''}{self.summary(status)}",
                      flush=True)
            left = self.total - self.done
            eta = "?" if not self.seconds else _hms(sum(self.seconds) / len(self.seconds) * left / self.args.parallel)
            print(f"{self.tag}: {self.done}/{self.total} runs done ({self.failed} failed), ETA {eta}", flush=True)

    def run_all(self, items):
        self.total = len(items)

        def one(item):
            finished = (item.run_dir(self.args.out, self.scale) / self.status_name).exists()
            t = time.monotonic()
            try:
                status, error = self.run_one(item)
            except OSError as e:  # e.g. the run folder cannot be written: this item fails, the others go on
                status, error = None, f"{e}"
            self.report(item, status, error, None if finished else time.monotonic() - t)

        with ThreadPoolExecutor(max_workers=self.args.parallel) as pool:
            for f in as_completed([pool.submit(one, it) for it in items]):
                f.result()
        return 1 if self.failed else 0


def _hms(seconds):
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"


def plan(args, items):
    """Writes every run's job file (python -m analysis.plan <out>/<scale> sizes them) and prints the size."""
    finished = []
    for it in items:
        run_dir = it.run_dir(args.out, args.scale)
        run_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(run_dir / "job.ini", job_text(args.scale, it, run_dir, args.cap_steps, args.data))
        status = run_dir / "atlas_status.json"
        if status.exists():
            finished.append(json.loads(status.read_text()))
    measured = [s for s in finished if s.get("seconds") and s.get("steps")]
    per_step = (sum(s["seconds"] for s in measured) / sum(s["steps"] for s in measured) if measured
                else SECONDS_PER_STEP[args.scale])
    steps = sum(s["steps"] for s in finished) / len(finished) if finished else args.cap_steps
    left = len(items) - len(finished)
    print(f"atlas plan: scale {args.scale}, {len({it.cell.name for it in items})} cells x {args.seeds} seeds = "
          f"{len(items)} runs ({len(finished)} finished), cap {args.cap_steps} steps, chunks of {args.chunk}")
    print(f"atlas plan: {'measured' if measured else 'assumed'} {per_step:.3f} s/step at {args.threads} thread(s), "
          f"{'measured' if finished else 'at most (the cap)'} {steps:.0f} steps a run: "
          f"{left} runs to go ~ {_hms(left * steps * per_step / args.parallel)} with --parallel {args.parallel}")
    print(f"atlas plan: job files in {Path(args.out) / args.scale}; python -m analysis.plan "
          f"{Path(args.out) / args.scale} sizes each run (FLOPs, tokens at the cap, memory)")
    return 0


def add_runner_options(ap):
    """The options every study's runner has (this one's and jobs/bridge/run.py's)."""
    ap.add_argument("--parallel", type=int, default=2, help="runs at once (default 2)")
    ap.add_argument("--threads", type=int, default=1, help="OpenMP threads of each run (default 1)")
    ap.add_argument("--bin", default=os.environ.get("SINKLAB_BIN", str(ROOT / "build" / "bin")),
                    help="the folder of sinklab-pretrain (default $SINKLAB_BIN or build/bin)")
    ap.add_argument("--item", type=int, default=None, help="run only item I of the list (a Slurm array task)")
    ap.add_argument("--list", action="store_true",
                    help="print the items: index, cell, seed, run folder (tab-separated)")


def runner_items(ap, args, counts, cell_by_name, default_cells, make_items, what):
    """The checks every study's parse() makes, then its items: each (flag, value) of `counts`, --seeds,
    --parallel and --threads >= 1; the --cells names known to `cell_by_name` (default: `default_cells`);
    make_items(cells, seeds); --item within them (`what` names the set in the message)."""
    for flag, value in (("--seeds", args.seeds), *counts, ("--parallel", args.parallel), ("--threads", args.threads)):
        if value < 1:
            ap.error(f"{flag} must be >= 1 (got {value})")
    names = [n for n in args.cells.split(",") if n]
    unknown = [n for n in names if n not in cell_by_name]
    if unknown:
        ap.error(f"--cells: no cell {', '.join(unknown)} (cells: {', '.join(cell_by_name)})")
    items = make_items([cell_by_name[n] for n in names] if names else default_cells, args.seeds)
    if args.item is not None and not 0 <= args.item < len(items):
        ap.error(f"--item {args.item}: {what} has items 0..{len(items) - 1}")
    return items


def parse(argv):
    ap = argparse.ArgumentParser(prog="python -m jobs.atlas.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=sorted(SCALES), default="small")
    ap.add_argument("--seeds", type=int, default=8, help="seeds 1..N of every cell (default 8)")
    ap.add_argument("--out", default="results/atlas", help="runs go to OUT/SCALE/CELL/seedK (default results/atlas)")
    ap.add_argument("--cells", default="", help="comma-separated cell names (default: every cell)")
    ap.add_argument("--principal", action="store_true", help="only the principal cells (cells/atlas.py)")
    ap.add_argument("--cap-steps", type=int, default=None, help="hard cap of steps a run (default by scale: CAPS)")
    ap.add_argument("--chunk", type=int, default=None, help="steps between convergence checks (default: CHUNKS)")
    ap.add_argument("--data", default=None, help="a data_prep bbm folder in place of the base file's data/bbm")
    ap.add_argument("--plan", action="store_true", help="write the job files and print the atlas' size; no training")
    add_runner_options(ap)
    args = ap.parse_args(argv)
    args.cap_steps = args.cap_steps or CAPS[args.scale]
    args.chunk = args.chunk or CHUNKS[args.scale]
    cells = cells_of(args.scale)
    items = runner_items(ap, args, (("--cap-steps", args.cap_steps), ("--chunk", args.chunk)),
                         {c.name: c for c in cells}, [c for c in cells if c.principal or not args.principal],
                         items_of, f"the atlas at scale {args.scale}")
    if args.data and not (Path(args.data) / "bbm.json").is_file():
        ap.error(f"--data {args.data}: no bbm.json there (python -m data_prep bbm --out DIR)")
    return args, items


def run_main(args, items, runner, plan_fn, header):
    """What a study's main() does once its arguments are parsed: --list, --plan (plan_fn(args, items)), or train
    the items (only --item's with --item) with `runner`, after printing `header`."""
    if args.list:
        for i, it in enumerate(items):
            print(f"{i}\t{it.cell.name}\t{it.seed}\t{it.run_dir(args.out, args.scale)}")
        return 0
    if args.plan:
        return plan_fn(args, items)
    if not runner.binary.exists():
        print(f"{runner.tag}: error: {runner.binary} not found (build it, or --bin / SINKLAB_BIN)", file=sys.stderr)
        return 2
    if args.item is not None:
        items = [items[args.item]]
    print(f"{runner.tag}: scale {args.scale}, {len(items)} run(s) into {Path(args.out) / args.scale}, "
          f"{args.parallel} at once x {args.threads} thread(s); {header}", flush=True)
    start = time.monotonic()
    rc = runner.run_all(items)
    print(f"{runner.tag}: wall time {_hms(time.monotonic() - start)}", flush=True)
    return rc


def main(argv):
    args, items = parse(argv)
    rule = budget_rule(args.cap_steps) if args.scale in BUDGET_SCALES else f"{convergence.RULE}; cap {args.cap_steps} steps"
    return run_main(args, items, Runner(args), plan, rule)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
