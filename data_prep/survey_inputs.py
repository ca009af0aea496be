"""Survey inputs: per Pile domain, n documents of at least T tokens, per model tokenizer.

The paper (Sec. 3.2, App. B.2) measures the sink on 100 sequences of T=64 tokens per domain, each
tokenised with the model's default special tokens (BOS for Llama/Mistral, ``</s>`` for OPT, none for
GPT-2/Pythia). The same candidate documents are offered to every tokenizer (same seed), so models
are compared on the same text as far as their tokenizers allow.

HDF5 layout, one file per tokenizer::

    /                 attrs: source_files, tokenizer_path, tokenizer_files, tokenizer_sha256 (the
                      fingerprint of tokenizer_files the survey matches models by), T, n_per_domain,
                      seed, policy, policy_family, prefix_token, prefix_id (-1: none), domains
    /<domain>/tokens  int32 [n, T]
    /<domain>/file_index int32 [n], /<domain>/line int64 [n]   where each row came from
                      attrs: pile_set_name, n, n_requested, n_candidates
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np

from . import DataPrepError
from .h5util import atomic_h5
from .pile import DOMAIN_KEYS, KEY_TO_SET_NAME, SkipReport, read_pile
from .tokenization import Tokenizer, load_tokenizer, special_token_policy


def sample_candidates(pile_paths: list, n: int, T: int, seed: int, oversample: int = 4,
                      report: SkipReport | None = None) -> dict[str, list]:
    """Per domain, a seeded uniform sample (reservoir) of n*oversample documents, in random order.

    Oversampling leaves room for documents that turn out shorter than T tokens; documents with
    fewer than T characters cannot reach T tokens with any tokenizer we know and are never
    candidates. Reservoir sampling streams, so the input may be far larger than memory.
    """
    k = n * oversample
    rng = random.Random(seed)
    reservoirs: dict[str, list] = {d: [] for d in DOMAIN_KEYS}
    seen = {d: 0 for d in DOMAIN_KEYS}
    for doc in read_pile(pile_paths, report):
        if len(doc.text) < T:
            continue
        seen[doc.domain] += 1
        res = reservoirs[doc.domain]
        if len(res) < k:
            res.append(doc)
        else:
            j = rng.randrange(seen[doc.domain])
            if j < k:
                res[j] = doc
    for d in DOMAIN_KEYS:
        reservoirs[d].sort(key=lambda x: (x.file_index, x.line))
        random.Random(f"{seed}:{d}").shuffle(reservoirs[d])
    return reservoirs


def tokenize_domain(tok: Tokenizer, prefix_id: int | None, docs: list, n: int, T: int):
    """First n candidates with at least T tokens (prefix included), truncated to T."""
    rows, picked = [], []
    prefix = [] if prefix_id is None else [prefix_id]
    for start in range(0, len(docs), 64):
        chunk = docs[start:start + 64]
        for doc, ids in zip(chunk, tok.encode_batch([d.text[: 64 * T] for d in chunk])):
            # Text beyond 64*T characters cannot change the first T tokens of any usual tokenizer
            # by much; cutting it keeps tokenisation of very long documents cheap.
            seq = prefix + ids
            if len(seq) >= T:
                rows.append(seq[:T])
                picked.append(doc)
                if len(rows) == n:
                    return rows, picked
    return rows, picked


def write_survey_inputs(out_path, tok: Tokenizer, candidates: dict[str, list], pile_paths: list,
                        n: int, T: int, seed: int, bos_policy: str = "auto") -> dict[str, int]:
    """Writes one HDF5 file for one tokenizer; returns rows per domain. Warns on short domains."""
    policy = special_token_policy(tok, bos_policy)
    counts = {}
    with atomic_h5(out_path) as f:
        f.attrs["source_files"] = [str(Path(p).resolve()) for p in pile_paths]
        f.attrs["tokenizer_path"] = str(tok.path.resolve())
        f.attrs["tokenizer_sha256"] = tok.sha256  # tokenization.tokenizer_fingerprint of tokenizer_files
        f.attrs["tokenizer_files"] = [p.name for p in tok.files]
        f.attrs["T"] = T
        f.attrs["n_per_domain"] = n
        f.attrs["seed"] = seed
        f.attrs["policy"] = policy.describe()
        f.attrs["policy_family"] = policy.family
        f.attrs["prefix_token"] = policy.prefix_token or ""
        f.attrs["prefix_id"] = -1 if policy.prefix_id is None else policy.prefix_id
        written = []
        for domain in DOMAIN_KEYS:
            rows, picked = tokenize_domain(tok, policy.prefix_id, candidates[domain], n, T)
            counts[domain] = len(rows)
            if len(rows) < n:
                print(f"survey-inputs: warning: {out_path}: domain {KEY_TO_SET_NAME[domain]!r} has "
                      f"{len(rows)} documents of >= {T} tokens, wanted {n}", file=sys.stderr)
            if not rows:
                continue
            g = f.create_group(domain)
            g.create_dataset("tokens", data=np.asarray(rows, dtype=np.int32))
            g.create_dataset("file_index", data=np.asarray([d.file_index for d in picked], dtype=np.int32))
            g.create_dataset("line", data=np.asarray([d.line for d in picked], dtype=np.int64))
            g.attrs["pile_set_name"] = KEY_TO_SET_NAME[domain]
            g.attrs["n"] = len(rows)
            g.attrs["n_requested"] = n
            g.attrs["n_candidates"] = len(candidates[domain])
            written.append(domain)
        f.attrs["domains"] = written
    return counts


def build_survey_inputs(pile_paths: list, model_dirs: list, *, out: str | None = None,
                        out_dir: str | None = None, n: int = 100, T: int = 64, seed: int = 0,
                        bos_policy: str = "auto", quiet: bool = False,
                        skipped: list | None = None) -> dict[str, dict[str, int]]:
    """Samples candidates once, then writes one file per tokenizer: ``out`` (one model) or
    ``out_dir/<model dir name>.h5``. Returns rows per domain per output file.

    A model directory whose tokenizer cannot be loaded, or whose leading special token cannot be
    decided, is reported on stderr (one line) and skipped when there are several: the others go on,
    and ``skipped`` (when given) receives (directory, reason) for each. All of them unreadable, or the
    one of --out: DataPrepError."""
    if T < 1 or n < 1:
        raise DataPrepError("--T and --n must be positive")
    if out is not None and len(model_dirs) != 1:
        raise DataPrepError("--out takes exactly one --model; use --out-dir for several")
    if out is None and out_dir is None:
        raise DataPrepError("pass --out FILE (one model) or --out-dir DIR")
    toks = []
    for m in model_dirs:
        try:
            tok = load_tokenizer(m)
            special_token_policy(tok, bos_policy)  # decided now, not after minutes of sampling
            toks.append((m, tok))
        except DataPrepError as e:
            if len(model_dirs) == 1:
                raise
            print(f"survey-inputs: skipped {m}: {e}", file=sys.stderr)
            if skipped is not None:
                skipped.append((str(m), str(e)))
    if not toks:
        raise DataPrepError(f"none of the {len(model_dirs)} model directories has a readable tokenizer")
    report = SkipReport()
    candidates = sample_candidates(pile_paths, n, T, seed, report=report)
    if not quiet:
        report.print("survey-inputs")
    result = {}
    for m, tok in toks:
        name = Path(m).name if Path(m).is_dir() else Path(m).parent.name
        path = Path(out) if out is not None else Path(out_dir) / f"{name}.h5"
        result[str(path)] = write_survey_inputs(path, tok, candidates, pile_paths, n, T, seed, bos_policy)
        if not quiet:
            print(f"survey-inputs: wrote {path} ({sum(result[str(path)].values())} rows)", file=sys.stderr)
    return result
