"""Names and captions that several sections share: run and model labels (made unique where two files or
two programs give one name), the order of the probe inputs, eps column names, and the caption line of
a probed model's figures (model, input, domain, T, n_seq, BOS and the file's notes).
"""
from pathlib import Path

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
    if any("bos" in e.attrs for e in entries):  # the prefix token id; -1: none
        parts.append("bos=" + set_text(("none" if attr_value(e.attrs, "bos") == "-1" else
                                        attr_value(e.attrs, "bos")) for e in entries))
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
    one name comes from two programs (sinklab-probe's and sinklab-survey's numbers are not pooled), and the
    file's name where two files hold the same (model, input, domain)."""
    tools = {}
    for e in entries:
        tools.setdefault(e.model, set()).add(measured_by(e))
    names = [f"{e.model} ({model_kind(e)})" if model_kind(e) else e.model for e in entries]
    names = [f"{n} [{measured_by(e)}]" if len(tools[e.model]) > 1 else n for n, e in zip(names, entries)]
    seen, clash = {}, set()
    for name, e in zip(names, entries):
        key = (name, e.input, e.domain)
        if key in seen and seen[key] != e.file:
            clash.add(name)
        seen.setdefault(key, e.file)
    return [f"{name} [{Path(e.file).name}]" if name in clash else name for name, e in zip(names, entries)]
