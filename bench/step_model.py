"""A roofline model of one training step from its ledger
(src/backend/ledger.hpp; docs/DESIGN.md, "The step ledger"), for a named GPU (bench/gpu_peaks.json), and the
step's counts that issue #53 sets limits on.

    python bench/step_model.py LEDGER.jsonl [--gpu h200] [--step step1] [--ptxas RESOURCES.json] [--json OUT]
        [--check 60m|1b]

The model, per entry of the step (an op call, or what the device did between ops):
  device time = max(matrix FLOPs / bf16 GEMM rate, attention FLOPs / attention rate,
                    (bytes + local-memory bytes) / copy bandwidth, stream operations x kernel floor)
  host time   = stream operations x host launch cost
where local-memory bytes are each launched thread's stack frame (ptxas's report of the kernel; a kernel
whose parameter structs sit in local memory copies them there per thread: the 2026-11-28 H200 run's f32 ->
bf16 copy, 1.018 ms for 16.8 M elements at 224 bytes a thread, is 0.90 ms of local traffic at 4167 GB/s).
The step is cut at its host synchronisations: each stretch between two takes max(device, host) (the host
queues ahead of the device until it must wait), and each synchronisation adds its stated cost. A model,
not a measurement: the standing GPU issue compares it op by op with a profile. A ledger written on a real GPU
under SINKLAB_PROFILE=1 carries each op's measured time: the table then shows it beside the model (a
synchronised op's time includes the launch and the synchronisation the model counts apart).

Counts (over the step named by --step, default the last "step<N>" scope of the ledger):
  activation conversions  copy ops between dtypes outside the "weights" scope, and conversion kernels
                          launched inside other ops
  weight conversions      copy ops between dtypes inside the "weights" scope (the bf16 weight copy)
  host syncs              host synchronisations anywhere in the step
  head chunks             cross_entropy calls per micro-step
  stream ops              kernel launches + library calls + copies per micro-step (and in the whole step)
MFU is the trainer's (PaLM's count: 6 FLOPs per matrix-product parameter per token plus 12 L H dh T for
attention, every key counted) over the modelled time and the dense bf16 peak.
--check 60m|1b exits 1 when a count or the modelled step misses issue #53's limits for that job.
"""
import argparse
import collections
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Issue #53's limits, checked by --check: the 60M job's step (its real micro-batch, 2 micro-steps, 32,768 tokens),
# and the 1B job's (its MFU; the conversions, synchronisations and head chunks hold for every job alike; its 22
# layers issue about twice the 60M job's stream operations per micro-step, which the issue bounds for the 60M
# job).
LIMITS = {
    "60m": {"activation_conversions": 0, "weight_conversions": 1, "host_syncs": 2, "head_chunks_per_micro": 4,
            "stream_ops_per_micro": 400, "step_ms": 70.0},
    "1b": {"activation_conversions": 0, "weight_conversions": 1, "host_syncs": 2, "head_chunks_per_micro": 4,
           "mfu_min": 0.40},
}
CONVERSION_KERNEL = re.compile(r"convert|to_bf16|to_f32|cast", re.I)


def load(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def step_entries(rows, step=None):
    """The entries of one step: those whose scope starts with `step` (default: the last step<N> scope)."""
    steps = sorted({r["scope"].split("/")[0] for r in rows if re.fullmatch(r"step\d+", r["scope"].split("/")[0])},
                   key=lambda s: int(s[4:]))
    if not steps:
        raise SystemExit("step_model: the ledger has no step<N> scope (was it written by a training run?)")
    step = step or steps[-1]
    picked = [r for r in rows if r["scope"] == step or r["scope"].startswith(step + "/")]
    if not picked:
        raise SystemExit(f"step_model: no entries in scope {step} (the ledger has {', '.join(steps)})")
    return step, picked


def device(row):
    return row.get("device") or {}


def stream_ops(row):
    """Launches + library calls + copies of an entry; one per op call when no device counter wrote them (a
    ledger written on a real GPU)."""
    if row.get("device") is None:
        return 0 if row["op"] == "(host)" else 1
    d = device(row)
    return d.get("launches", 0) + d.get("library_calls", 0) + d.get("copies", 0)


def attention_rate(peaks, dh, backward):
    """TFLOP/s of attention at head dim dh, interpolated between the figures given."""
    table = sorted((int(k), v) for k, v in peaks["attention_tflops"].items())
    i = 1 if backward else 0
    if dh <= table[0][0]:
        return table[0][1][i]
    for (d0, v0), (d1, v1) in zip(table, table[1:]):
        if dh <= d1:
            return v0[i] + (v1[i] - v0[i]) * (dh - d0) / (d1 - d0)
    return table[-1][1][i]


def local_bytes(row, frames):
    """Each launched thread's stack frame, by the kernel's name in ptxas's report (0 when unknown)."""
    total = 0
    for name, threads in device(row).get("kernels", []):
        base = re.sub(r"<.*", "", name).split("::")[-1]
        total += threads * frames.get(base, 0)
    return total


def stack_frames(report):
    """{kernel name: stack frame bytes} from a ptxas report: the CUDA build's build-cuda/ptxas_report.json
    ({"kernels": [{"kernel": qualified name, "arch", "stack", ...}]}: the largest frame over archs and template
    instances) or {name: {"stack": bytes}} (bench/ledger/ptxas-sm90-4ac1149.json)."""
    if "kernels" in report:
        frames = {}
        for k in report["kernels"]:
            base = re.sub(r"<.*", "", k["kernel"]).split("::")[-1]
            frames[base] = max(frames.get(base, 0), k.get("stack", 0))
        return frames
    return {k: v.get("stack", 0) for k, v in report.items() if isinstance(v, dict)}


def model_entry(row, peaks, frames):
    """(device seconds, host seconds, what bounds it) of one entry."""
    flops, bytes_ = row.get("flops", 0), row.get("bytes", 0) + local_bytes(row, frames)
    op = row["op"]
    if op.startswith("attention") and flops:
        dh = row["operands"][2 if op == "attention_forward" else 4]["shape"][3]
        compute = flops / (attention_rate(peaks, dh, op == "attention_backward") * 1e12)
    else:
        compute = flops / (peaks["bf16_gemm_tflops"] * 1e12)
    memory = bytes_ / (peaks["copy_gb_s"] * 1e9)
    floor = stream_ops(row) * peaks["kernel_floor_us"] * 1e-6
    dev = max(compute, memory, floor)
    bound = "compute" if dev == compute and compute > 0 else "memory" if dev == memory and memory > 0 else "launch"
    return dev, stream_ops(row) * peaks["host_launch_us"] * 1e-6, bound


def palm_flops(entries):
    """The trainer's MFU numerator for the step: 3x the forward matrix FLOPs (2 per parameter and token, from
    the forward linear calls) plus 12 L H dh T per token for attention (every key counted)."""
    total = 0.0
    for r in entries:
        if r["op"] == "linear_forward":
            total += 3 * r["flops"]
        elif r["op"] == "attention_forward":
            B, T, H, dh = r["operands"][2]["shape"]
            total += 12.0 * B * T * H * dh * T
    return total


def tokens_of(entries):
    """Tokens of the step: the ids the embedding read in the forward passes."""
    return sum(r["operands"][1]["shape"][0] for r in entries
               if r["op"] == "embedding_forward" and "/forward" in r["scope"])


def is_micro(scope):
    parts = scope.split("/")
    return len(parts) > 1 and re.fullmatch(r"micro\d+", parts[1])


def analyse(rows, peaks, frames=None, step=None):
    frames = frames or {}
    step, entries = step_entries(rows, step)
    by_op = collections.OrderedDict()
    segments, seg_dev, seg_host, syncs = [], 0.0, 0.0, 0
    counts = collections.Counter()
    micro_ops, micro_chunks = collections.Counter(), collections.Counter()
    for r in entries:
        dev, host, bound = model_entry(r, peaks, frames)
        d = device(r)
        e = by_op.setdefault(r["op"], {"calls": 0, "bytes": 0.0, "local_bytes": 0.0, "flops": 0.0, "stream_ops": 0,
                                       "host_syncs": 0, "device_s": 0.0, "measured_s": None,
                                       "bound": collections.Counter()})
        if "seconds" in r:  # SINKLAB_PROFILE on a real device: the op's own synchronised wall time
            e["measured_s"] = (e["measured_s"] or 0.0) + r["seconds"]
        e["calls"] += 1
        e["bytes"] += r.get("bytes", 0)
        e["local_bytes"] += local_bytes(r, frames)
        e["flops"] += r.get("flops", 0)
        e["stream_ops"] += stream_ops(r)
        e["host_syncs"] += d.get("host_syncs", 0)
        e["device_s"] += dev
        e["bound"][bound] += 1
        in_weights = "/weights" in r["scope"]
        if r.get("converts"):
            counts["weight_conversions" if in_weights else "activation_conversions"] += 1
        counts["activation_conversions"] += sum(1 for k, _ in d.get("kernels", []) if CONVERSION_KERNEL.search(k)
                                                and r["op"] != "copy")
        counts["stream_ops"] += stream_ops(r)
        if is_micro(r["scope"]):
            micro = r["scope"].split("/")[1]
            micro_ops[micro] += stream_ops(r)
            if r["op"] == "cross_entropy":
                micro_chunks[micro] += 1
        seg_dev += dev
        seg_host += host
        for _ in range(d.get("host_syncs", 0)):  # the stream drains here: close the stretch
            segments.append(max(seg_dev, seg_host))
            seg_dev = seg_host = 0.0
            syncs += 1
    segments.append(max(seg_dev, seg_host))
    step_s = sum(segments) + syncs * peaks["host_sync_us"] * 1e-6
    tokens = tokens_of(entries)
    mfu = palm_flops(entries) / step_s / (peaks["dense_bf16_peak_tflops"] * 1e12) if step_s > 0 else 0.0
    measured = [e["measured_s"] for e in by_op.values() if e["measured_s"] is not None]
    return {
        "step": step, "gpu": peaks["name"], "tokens": tokens, "step_ms": step_s * 1e3,
        "measured_ops_ms": sum(measured) * 1e3 if measured else None,
        "device_ms": sum(e["device_s"] for e in by_op.values()) * 1e3,
        "tokens_per_s": tokens / step_s if step_s else 0.0, "mfu": mfu,
        "host_syncs": syncs, "activation_conversions": counts["activation_conversions"],
        "weight_conversions": counts["weight_conversions"], "stream_ops": counts["stream_ops"],
        "micro_steps": len(micro_ops), "stream_ops_per_micro": max(micro_ops.values(), default=0),
        "head_chunks_per_micro": max(micro_chunks.values(), default=0),
        "ops": {op: {**e, "bound": dict(e["bound"])} for op, e in by_op.items()},
    }


def failures(result, job):
    """The limits of LIMITS[job] the result misses, as lines."""
    lim, out = LIMITS[job], []
    for key in ("activation_conversions", "weight_conversions", "host_syncs", "head_chunks_per_micro",
                "stream_ops_per_micro"):
        if key in lim and result[key] > lim[key]:
            out.append(f"{key} {result[key]} > {lim[key]}")
    if "step_ms" in lim and result["step_ms"] > lim["step_ms"]:
        out.append(f"modelled step {result['step_ms']:.1f} ms > {lim['step_ms']} ms")
    if "mfu_min" in lim and result["mfu"] < lim["mfu_min"]:
        out.append(f"modelled MFU {100 * result['mfu']:.1f} % < {100 * lim['mfu_min']:.0f} %")
    return out


def report(result):
    r = result
    lines = [f"step model: {r['step']} on {r['gpu']}: {r['tokens']} tokens, modelled {r['step_ms']:.1f} ms "
             f"({r['tokens_per_s']:,.0f} tokens/s, MFU {100 * r['mfu']:.1f} %; device busy {r['device_ms']:.1f} ms)",
             f"  host syncs {r['host_syncs']}, activation conversions {r['activation_conversions']}, weight conversions "
             f"{r['weight_conversions']}, head chunks per micro-step {r['head_chunks_per_micro']}, stream ops "
             f"{r['stream_ops']} ({r['stream_ops_per_micro']} in the largest of {r['micro_steps']} micro-steps)",
             f"  {'op':22s} {'calls':>6s} {'GB':>8s} {'local GB':>9s} {'TFLOP':>8s} {'stream':>7s} {'syncs':>6s} "
             f"{'model ms':>9s} {'share':>6s}  bound"]
    measured = r["measured_ops_ms"] is not None
    if measured:
        lines[0] += (f"; measured: the ops' own times sum to {r['measured_ops_ms']:.1f} ms (each op synchronised, "
                     f"SINKLAB_PROFILE), {r['measured_ops_ms'] / r['device_ms']:.2f}x the modelled device time")
        lines[2] += f" {'meas ms':>9s} {'meas/model':>10s}"
    total = sum(e["device_s"] for e in r["ops"].values()) or 1.0
    for op, e in sorted(r["ops"].items(), key=lambda kv: -kv[1]["device_s"]):
        bound = ",".join(f"{k} {v}" for k, v in sorted(e["bound"].items(), key=lambda kv: -kv[1]))
        line = (f"  {op:22s} {e['calls']:6d} {e['bytes'] / 1e9:8.3f} {e['local_bytes'] / 1e9:9.3f} "
                f"{e['flops'] / 1e12:8.3f} {e['stream_ops']:7d} {e['host_syncs']:6d} {e['device_s'] * 1e3:9.3f} "
                f"{100 * e['device_s'] / total:5.1f}%  {bound}")
        if measured and e["measured_s"] is not None:
            ratio = e["measured_s"] / e["device_s"] if e["device_s"] > 0 else float("inf")
            line = line[:line.rindex("%") + 1] + f" {e['measured_s'] * 1e3:9.3f} {ratio:10.2f}" + line[line.rindex("%") + 1:]
        lines.append(line)
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python bench/step_model.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ledger")
    ap.add_argument("--gpu", default="h200", help="a device of bench/gpu_peaks.json (default h200)")
    ap.add_argument("--step", default=None, help="the step's scope (default: the ledger's last step<N>)")
    ap.add_argument("--ptxas", default=None,
                    help="ptxas's resource report as JSON {kernel: {\"stack\": bytes, ...}}: local-memory traffic")
    ap.add_argument("--json", default=None, help="write the result here as JSON")
    ap.add_argument("--check", choices=sorted(LIMITS), default=None, help="exit 1 when issue #53's limits are missed")
    args = ap.parse_args(argv)
    peaks_all = json.loads((HERE / "gpu_peaks.json").read_text())
    if args.gpu not in peaks_all:
        ap.error(f"--gpu {args.gpu}: bench/gpu_peaks.json has {', '.join(k for k in peaks_all if not k.startswith('_'))}")
    frames = stack_frames(json.loads(Path(args.ptxas).read_text())) if args.ptxas else {}
    result = analyse(load(args.ledger), peaks_all[args.gpu], frames, args.step)
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if args.check:
        missed = failures(result, args.check)
        for line in missed:
            print(f"step model: MISSED ({args.check}): {line}")
        if missed:
            return 1
        print(f"step model: every limit of issue #53 for the {args.check} job holds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
