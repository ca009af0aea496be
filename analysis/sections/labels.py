"""Names and captions that several sections share: run and model labels (made unique where two files or
two programs give one name), the order of the probe inputs, eps column names, and the caption line of
a probed model's figures (model, input, domain, T, n_seq, BOS and the file's notes).
"""
from pathlib import Path

from analysis.describe import DEFAULTS
from analysis.results import NOTE_ATTRS, attr_text

INPUT_ORDER = ("natural", "random", "repeat")


def attr_value(attrs, key):
    """An attribute as text, None when absent."""
    return attr_text(attrs[key]) if key in attrs else None


def set_text(values):
    """The one value of `values` (None left out), "{a, b}" when they differ, "?" when there is none."""
    vals = sorted({v for v in values if v is not None}, key=str)
    if not vals:
        return "?"
    return vals[0] if len(vals) == 1 else "{" + ", ".join(vals) + "}"


def entry_caption(entries, domain_text):
    """model | input | domain | T | n_seq | bos | quantisation/source notes of the entries drawn."""
    e0 = entries[0]
    parts = [e0.model, f"input {e0.input}", f"domain {domain_text}",
             "T=" + set_text(attr_value(e.attrs, "T") for e in entries),
             "n_seq=" + set_text(attr_value(e.attrs, "n_seq") for e in entries)]
    parts.append("first token=" + set_text(first_token(e) for e in entries))
    for key in NOTE_ATTRS:
        if any(key in e.attrs for e in entries):
            parts.append(f"{key}: " + set_text(attr_value(e.attrs, key) for e in entries))
    return " | ".join(parts)


def eps_col(prefix, e):
    """The column name of a metric at one threshold: Sink_1^0.3."""
    return f"{prefix}^{e:g}"


def run_labels(runs):
    """Run names, with the file's name added where two files hold runs of the same name."""
    counts = {}
    for r in runs:
        counts[r.name] = counts.get(r.name, 0) + 1
    return [r.name if counts[r.name] == 1 else f"{r.name} [{Path(r.file).name}]" for r in runs]


def ordered_inputs(inputs):
    """Probe inputs in the paper's order (natural, random, repeat), then any others by name."""
    known = [i for i in INPUT_ORDER if i in inputs]
    return known + sorted(i for i in inputs if i not in INPUT_ORDER)


def measured_by(e):
    """The program that measured an entry (the file's command_line), or "?" where the file does not say."""
    return e.tool or "?"


def model_kind(e):
    """'instruct, Q4_1' for a model imported from a GGUF file (the variant and llama.cpp's quantisation mix
    that data_prep gguf-import noted in sinklab_source.json and the survey copied), '' otherwise."""
    parts = [attr_value(e.attrs, k) for k in ("variant", "file_type")]
    return ", ".join(p for p in parts if p)


def model_labels(entries):
    """Model names, with base/instruct and the quantisation where the survey recorded them ("gemma3-270m
    (base, Q4_K_M)": every table row and figure names what was measured), the measuring program added where
    one name comes from two programs (sinklab-probe's and sinklab-survey's numbers are not pooled), the
    sequence length where one model was measured at several ("gemma3-270m (base, Q4_K_M, T=64)"), and the
    file's name where two files hold the same (model, input, domain)."""
    tools, lengths = {}, {}  # lengths: (model, file) -> the T of its plain inputs (natural, not natural@T256)
    for e in entries:
        tools.setdefault(e.model, set()).add(measured_by(e))
        if "@T" not in e.input:
            lengths.setdefault((e.model, e.file), set()).add(attr_value(e.attrs, "T"))

    # A model measured at several sequence lengths (a survey at T = 64, StreamingLLM's at T = 1024, in two
    # files): T in the label, so that its rows are not taken for one another. A file's other lengths of one
    # survey (natural@T256, the Sink-vs-T items) keep the label of that file's plain inputs.
    def file_T(e):
        ts = lengths.get((e.model, e.file), set())
        return next(iter(ts)) if len(ts) == 1 else attr_value(e.attrs, "T")

    several = {m for m in tools if len({file_T(e) for e in entries if e.model == m}) > 1}

    def label_of(e):
        notes = [p for p in (model_kind(e), f"T={file_T(e)}" if e.model in several else "") if p]
        label = f"{e.model} ({', '.join(notes)})" if notes else e.model
        return f"{label} [{measured_by(e)}]" if len(tools[e.model]) > 1 else label

    names = [label_of(e) for e in entries]
    seen, clash = {}, set()
    for name, e in zip(names, entries):
        key = (name, e.input, e.domain)
        if key in seen and seen[key] != e.file:
            clash.add(name)
        seen.setdefault(key, e.file)
    return [f"{name} [{Path(e.file).name}]" if name in clash else name for name, e in zip(names, entries)]


def checkpoint_name(path):
    """A sinklab checkpoint as the page names it: ".../<run dir>/checkpoints/step_400" -> "<run dir>, step
    400"; any other path by its last component."""
    parts = Path(str(path)).parts
    if len(parts) >= 3 and parts[-2] == "checkpoints" and parts[-1].startswith("step_") and parts[-1][5:].isdigit():
        return f"{parts[-3]}, step {int(parts[-1][5:])}"
    return Path(str(path)).name or str(path)


def first_token(e):
    """The token the probe put first in every sequence of an entry, as its file records it: the token of an
    intervention at position 1 (sinklab-probe --fixed-token-position 1 --fixed-token-id ID: attribute
    intervention "fixed=1:ID"), else the survey's prefix token (attribute bos; -1: none); sinklab-probe puts
    no token of its own first (its bos attribute is not one), so "none" there. None when the file does not say."""
    for part in attr_text(e.attrs.get("intervention", "")).split():
        key, _, value = part.partition("=")
        if key == "fixed" and value.startswith("1:"):
            return value[2:]
    if measured_by(e) == "sinklab-probe":
        return "none"
    bos = attr_value(e.attrs, "bos")
    return None if bos is None else ("none" if bos == "-1" else bos)


def sinklab_checkpoint(e):
    """The checkpoint directory of an entry that measured one of sinklab's own models (sinklab-probe's
    attribute checkpoint, or a survey item of model_type sinklab: its model_dir), else None."""
    if "checkpoint" in e.attrs:
        return attr_text(e.attrs["checkpoint"])
    if attr_value(e.attrs, "model_type") == "sinklab" and "model_dir" in e.attrs:
        return attr_text(e.attrs["model_dir"])
    return None


def variant_text(settings):
    """A sinklab run's model as the page names it, from its settings (ini text read by
    results.ini_settings): attention, biases, the first token of its data, window, size."""
    sim, norm = settings.get("attn-sim", DEFAULTS["attn-sim"]), settings.get("attn-norm", DEFAULTS["attn-norm"])
    if (sim, norm) == ("exp", "sum"):
        parts = ["softmax"]
    elif norm == "one":
        parts = [f"{sim} attention without normalisation"]
    else:
        parts = [f"{sim} attention, norm {norm}"]
    if settings.get("attn-bias", DEFAULTS["attn-bias"]) not in ("none", ""):
        parts.append(f"{settings['attn-bias']} bias")
    if settings.get("fixed-token-position", DEFAULTS["fixed-token-position"]) == "1":
        parts.append(f"token {settings.get('fixed-token-id', '?')} first")
    if settings.get("attn-window", DEFAULTS["attn-window"]) not in ("0", ""):
        parts.append(f"window {settings['attn-window']}")
    if "d-model" in settings:
        parts.append(f"d={settings['d-model']}, {settings.get('n-layers', '?')} layers, "
                     f"{settings.get('n-heads', '?')} heads")
    return ", ".join(parts)
