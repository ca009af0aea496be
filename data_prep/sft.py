"""UltraChat-200k style SFT data: chat template, assistant-only loss mask, packing.

Input: jsonl, one record per line with ``messages: [{"role": ..., "content": ...}, ...]`` (the
UltraChat-200k field; ``prompt``/``prompt_id`` are ignored). Roles: system, user, assistant.

Chat template (explicit, not the tokenizer's jinja template, so that the mask is exact and the
output does not depend on jinja or on HF's rendering rules)::

    [BOS, if the model's special-token policy has one]
    <|system|>\\n{content}\\n             loss_mask 0
    <|user|>\\n{content}\\n               loss_mask 0
    <|assistant|>\\n                       loss_mask 0
    {content}<EOS>                         loss_mask 1   (the model learns to answer and to stop)

Each piece is tokenised on its own and the ids concatenated, so the mask boundary is a token
boundary by construction. Conversations are concatenated into one stream and cut into rows of
``context`` tokens (a conversation may straddle two rows); the last row is padded with EOS and
mask 0. ``loss_mask[r, i] = 1`` means token i is an assistant token, i.e. the loss term that
predicts token i from tokens < i counts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from . import DataPrepError
from .h5util import atomic_h5
from .pile import SkipReport, open_lines, parse_json_line
from .tokenization import Tokenizer, eos_token, load_tokenizer, special_token_policy

ROLE_HEADERS = {"system": "<|system|>\n", "user": "<|user|>\n", "assistant": "<|assistant|>\n"}
TEMPLATE_DOC = "simple: <|role|>\\n{content}\\n per turn; assistant content + EOS is the only loss"


def read_conversations(path, report: SkipReport):
    """Yields lists of (role, content) from a jsonl file; malformed records are counted, not used."""
    for lineno, raw in enumerate(open_lines(path), start=1):
        where = f"{Path(path).name}:{lineno}"
        obj = parse_json_line(raw, where, report)
        if obj is None:
            continue
        msgs = obj.get("messages")
        if not isinstance(msgs, list) or not msgs:
            report.skip("missing or empty 'messages'", where)
            continue
        turns = []
        for m in msgs:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                turns = None
                report.skip("message without string 'content'", where)
                break
            if m.get("role") not in ROLE_HEADERS:
                turns = None
                report.skip("unknown role", where)
                break
            turns.append((m["role"], m["content"]))
        if turns is None:
            continue
        if not any(r == "assistant" for r, _ in turns):
            report.skip("no assistant turn", where)
            continue
        report.accepted += 1
        yield turns


def render(tok: Tokenizer, turns, eos_id: int, prefix_id: int | None) -> tuple[list[int], list[int]]:
    """Token ids and loss mask of one conversation under the template above."""
    ids: list[int] = [] if prefix_id is None else [prefix_id]
    mask: list[int] = [0] * len(ids)
    for role, content in turns:
        if role == "assistant":
            head = tok.encode(ROLE_HEADERS[role])
            body = tok.encode(content) + [eos_id]
            ids += head + body
            mask += [0] * len(head) + [1] * len(body)
        else:
            part = tok.encode(ROLE_HEADERS[role] + content + "\n")
            ids += part
            mask += [0] * len(part)
    return ids, mask


def build_sft(input_path, model_dir, out_path, *, context: int = 2048, bos_policy: str = "auto",
              eos_override: str | None = None, max_records: int = 0, quiet: bool = False) -> dict:
    """Writes ``tokens`` int32 [N, C] and ``loss_mask`` uint8 [N, C] to an HDF5 file."""
    if context < 2:
        raise DataPrepError(f"--context {context} must be at least 2")
    tok = load_tokenizer(model_dir)
    eos, eos_id = eos_token(tok, eos_override)
    policy = special_token_policy(tok, bos_policy)
    report = SkipReport(what="records")
    stream_ids: list[int] = []
    stream_mask: list[int] = []
    n_conv = 0
    for turns in read_conversations(input_path, report):
        ids, mask = render(tok, turns, eos_id, policy.prefix_id)
        stream_ids += ids
        stream_mask += mask
        n_conv += 1
        if max_records and n_conv >= max_records:
            break
    if not quiet:
        report.print("sft")
    if n_conv == 0:
        raise DataPrepError(f"{input_path}: no usable conversation")
    n_real = len(stream_ids)
    n_rows = -(-n_real // context)
    pad = n_rows * context - n_real
    tokens = np.asarray(stream_ids + [eos_id] * pad, dtype=np.int32).reshape(n_rows, context)
    loss_mask = np.asarray(stream_mask + [0] * pad, dtype=np.uint8).reshape(n_rows, context)
    with atomic_h5(out_path) as f:
        f.create_dataset("tokens", data=tokens, compression="gzip", chunks=(1, context))
        f.create_dataset("loss_mask", data=loss_mask, compression="gzip", chunks=(1, context))
        f.attrs["source_file"] = str(Path(input_path).resolve())
        f.attrs["tokenizer_path"] = str(tok.path.resolve())
        f.attrs["tokenizer_sha256"] = tok.sha256
        f.attrs["context"] = context
        f.attrs["chat_template"] = TEMPLATE_DOC
        f.attrs["eos_token"] = eos
        f.attrs["eos_id"] = eos_id
        f.attrs["policy"] = policy.describe()
        f.attrs["n_conversations"] = n_conv
        f.attrs["n_tokens"] = n_real
        f.attrs["n_pad_tokens"] = pad
        f.attrs["n_loss_tokens"] = int(loss_mask.sum())
        f.attrs["skipped_records"] = report.skipped
    summary = {"rows": n_rows, "conversations": n_conv, "tokens": n_real, "pad": pad,
               "loss_tokens": int(loss_mask.sum()), "skipped": report.skipped}
    if not quiet:
        print(f"sft: wrote {out_path}: {n_rows} rows x {context}, {n_conv} conversations, "
              f"{summary['loss_tokens']} loss tokens", file=sys.stderr)
    return summary
