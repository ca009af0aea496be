"""HellaSwag-format multiple-choice items as tokens, for the survey's log-likelihood scorer (paper Fig. 10:
the sink beside HellaSwag accuracy, which the paper took from lm-evaluation-harness).

Input: jsonl, one example per line, as the HellaSwag release (and lm-evaluation-harness's copy) has
them: ``ctx_a``, ``ctx_b`` (or ``ctx`` alone), ``activity_label``, ``endings`` (the choices) and ``label``
(the index of the right ending). The text is formed as lm-evaluation-harness's hellaswag task forms it:

    context   = clean(activity_label + ": " + ctx_a + " " + capitalize(ctx_b))
    choice i  = clean(endings[i]), scored as the continuation " " + choice i
    clean(s)  = s stripped; " [title]" -> ". "; any other "[...]" tag removed; "  " -> " "

and tokenised as its ``_encode_pair``: trailing spaces of the context move to the continuation, then
``whole = encode(context + continuation)``, ``context_ids = encode(context)`` and the continuation's tokens
are ``whole[len(context_ids):]``. The model's default leading special token (BOS for Llama/Mistral,
``</s>`` for OPT, none for GPT-2/Pythia: tokenization.special_token_policy, as for survey inputs) comes
first. acc_norm divides a choice's log-likelihood by ``len(choice i)`` in characters, as the harness does.

HDF5 layout, one file per tokenizer (read by src/probe/multiple_choice.cpp)::

    /                 attrs: kind = "hellaswag", source_file, tokenizer_path, tokenizer_files,
                      tokenizer_sha256, policy, prefix_id (-1: none), n_examples, template
    /tokens           int32 [total]  every choice's context + continuation, back to back
    /choice_offsets   int64 [C+1]    choice c is tokens[choice_offsets[c]:choice_offsets[c+1]]
    /cont_start       int32 [C]      where the continuation starts inside its choice
    /choice_chars     int32 [C]      len(choice text), acc_norm's length
    /example_offsets  int64 [N+1]    example e's choices are [example_offsets[e], example_offsets[e+1])
    /label            int32 [N]
    /line             int64 [N]      the jsonl line each example came from
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

from . import DataPrepError
from .h5util import atomic_h5
from .pile import SkipReport, open_lines, parse_json_line
from .tokenization import Tokenizer, load_tokenizer, special_token_policy

TEMPLATE = ('lm-evaluation-harness hellaswag: context = clean(activity_label + ": " + ctx_a + " " + '
            'capitalize(ctx_b)), continuation = " " + clean(ending); acc_norm by characters of the ending')


def clean(text: str) -> str:
    """The WikiHow artefacts of HellaSwag removed, as the harness's hellaswag preprocessing does."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def example_text(obj: dict) -> tuple[str, list[str], int]:
    """(context, choices, label) of one HellaSwag record; ValueError says what is wrong with it."""
    if "ctx_a" in obj or "ctx_b" in obj:
        ctx_a, ctx_b = obj.get("ctx_a", ""), obj.get("ctx_b", "")
        if not isinstance(ctx_a, str) or not isinstance(ctx_b, str):
            raise ValueError("ctx_a / ctx_b are not strings")
        ctx = ctx_a + " " + ctx_b.capitalize()
    elif isinstance(obj.get("ctx"), str):
        ctx = obj["ctx"]
    else:
        raise ValueError("no ctx_a/ctx_b or ctx")
    activity = obj.get("activity_label", "")
    if not isinstance(activity, str):
        raise ValueError("activity_label is not a string")
    endings = obj.get("endings")
    if not isinstance(endings, list) or len(endings) < 2 or not all(isinstance(e, str) for e in endings):
        raise ValueError("endings is not a list of at least two strings")
    label = obj.get("label")
    if isinstance(label, str) and label.strip().lstrip("-").isdigit():
        label = int(label)  # the release stores it as a string
    if not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < len(endings):
        raise ValueError("label is not the index of an ending")
    choices = [clean(e) for e in endings]
    if any(not c for c in choices):
        raise ValueError("an ending is empty")
    context = clean(activity + ": " + ctx) if activity else clean(ctx)
    return context, choices, label


def encode_pair(tok: Tokenizer, prefix: list[int], context: str, continuation: str) -> tuple[list[int], list[int]]:
    """(context ids, continuation ids) as the harness splits them (see the module docstring)."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole = tok.encode(context + continuation)
    context_ids = tok.encode(context)
    return prefix + context_ids, whole[len(context_ids):]


def read_examples(path, report: SkipReport, limit: int = 0):
    """Yields (line, context, choices, label); malformed records are counted and skipped."""
    n = 0
    for lineno, raw in enumerate(open_lines(path), start=1):
        where = f"{Path(path).name}:{lineno}"
        obj = parse_json_line(raw, where, report)
        if obj is None:
            continue
        try:
            context, choices, label = example_text(obj)
        except ValueError as e:
            report.skip(str(e), where)
            continue
        yield lineno, context, choices, label
        n += 1
        if limit and n == limit:
            return


def write_hellaswag(out_path, tok: Tokenizer, examples: list, source: str, bos_policy: str = "auto") -> int:
    """One HDF5 file for one tokenizer; returns the number of examples written."""
    policy = special_token_policy(tok, bos_policy)
    prefix = [] if policy.prefix_id is None else [policy.prefix_id]
    tokens, choice_offsets, cont_start, choice_chars, example_offsets, labels, lines = [], [0], [], [], [0], [], []
    for line, context, choices, label in examples:
        for choice in choices:
            ctx_ids, cont_ids = encode_pair(tok, prefix, context, " " + choice)
            if not ctx_ids or not cont_ids:
                raise DataPrepError(f"{source}:{line}: the context or an ending encodes to no token")
            tokens += ctx_ids + cont_ids
            choice_offsets.append(len(tokens))
            cont_start.append(len(ctx_ids))
            choice_chars.append(len(choice))
        example_offsets.append(len(cont_start))
        labels.append(label)
        lines.append(line)
    with atomic_h5(out_path) as f:
        f.attrs["kind"] = "hellaswag"
        f.attrs["source_file"] = str(Path(source).resolve())
        f.attrs["tokenizer_path"] = str(tok.path.resolve())
        f.attrs["tokenizer_sha256"] = tok.sha256
        f.attrs["tokenizer_files"] = [p.name for p in tok.files]
        f.attrs["policy"] = policy.describe()
        f.attrs["prefix_id"] = -1 if policy.prefix_id is None else policy.prefix_id
        f.attrs["n_examples"] = len(labels)
        f.attrs["template"] = TEMPLATE
        f.create_dataset("tokens", data=np.asarray(tokens, dtype=np.int32))
        f.create_dataset("choice_offsets", data=np.asarray(choice_offsets, dtype=np.int64))
        f.create_dataset("cont_start", data=np.asarray(cont_start, dtype=np.int32))
        f.create_dataset("choice_chars", data=np.asarray(choice_chars, dtype=np.int32))
        f.create_dataset("example_offsets", data=np.asarray(example_offsets, dtype=np.int64))
        f.create_dataset("label", data=np.asarray(labels, dtype=np.int32))
        f.create_dataset("line", data=np.asarray(lines, dtype=np.int64))
    return len(labels)


def build_hellaswag(jsonl: str, model_dirs: list, *, out: str | None = None, out_dir: str | None = None,
                    limit: int = 0, bos_policy: str = "auto", quiet: bool = False) -> dict[str, int]:
    """Reads the examples once, then writes one file per tokenizer: ``out`` (one model) or
    ``out_dir/<model dir name>.h5``. Returns examples written per file."""
    if out is not None and len(model_dirs) != 1:
        raise DataPrepError("--out takes exactly one --model; use --out-dir for several")
    if out is None and out_dir is None:
        raise DataPrepError("pass --out FILE (one model) or --out-dir DIR")
    toks = [(m, load_tokenizer(m)) for m in model_dirs]
    for _, tok in toks:
        special_token_policy(tok, bos_policy)  # decided before reading the file
    report = SkipReport()
    examples = list(read_examples(jsonl, report, limit))
    if not quiet:
        report.print("hellaswag")
    if not examples:
        raise DataPrepError(f"{jsonl}: no usable HellaSwag example")
    result = {}
    for m, tok in toks:
        name = Path(m).name if Path(m).is_dir() else Path(m).parent.name
        path = Path(out) if out is not None else Path(out_dir) / f"{name}.h5"
        result[str(path)] = write_hellaswag(path, tok, examples, jsonl, bos_policy)
        if not quiet:
            print(f"hellaswag: wrote {path} ({result[str(path)]} examples)", file=sys.stderr)
    return result
