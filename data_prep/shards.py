"""Token shards in the C++ format (src/io/shard.hpp), and the pre-training shard builder.

Format (little-endian), fixed by src/io/shard.hpp -- keep the two in sync:

    0  8  magic "SLTOKENS"     8  4 version 2        12 4 header_bytes 64
    16 4  vocab_size           20 4 token_bytes 2|4  24 8 n_tokens
    32 8  n_documents          40 4 eos_id           44 4 bos_id (0xFFFFFFFF = none)
    48 4  crc32 (zlib) of the token bytes            52 8 reserved, zero
    60 4  header_crc32 (zlib) of bytes 0..59
    64 .. n_tokens * token_bytes token ids

The file size must be exactly 64 + n_tokens * token_bytes. Version 1 (no header_crc32: bytes 52..63
reserved, zero) is still read; every reader checks each token id against vocab_size.
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from . import DataPrepError
from .pile import DOMAIN_KEYS, SkipReport, domain_key, read_pile
from .tokenization import bos_token, eos_token, load_tokenizer

MAGIC = b"SLTOKENS"
VERSION = 2  # written; version 1 is still read
HEADER_BYTES = 64
HEADER_CRC_OFFSET = 60  # version 2: the CRC-32 of the header bytes before it
NO_BOS = 0xFFFFFFFF
_HEADER = struct.Struct("<8sIIIIQQIII8sI")
assert _HEADER.size == HEADER_BYTES


@dataclass
class ShardHeader:
    vocab_size: int
    token_bytes: int
    n_tokens: int
    n_documents: int
    eos_id: int
    bos_id: int
    crc32: int
    version: int = VERSION
    header_crc32: int = 0  # version 2; 0 in version 1

    def pack(self) -> bytes:
        """The header in the current version, its header_crc32 (set here) over the bytes before it."""
        head = _HEADER.pack(MAGIC, VERSION, HEADER_BYTES, self.vocab_size, self.token_bytes, self.n_tokens,
                            self.n_documents, self.eos_id, self.bos_id, self.crc32, b"\0" * 8, 0)
        self.version, self.header_crc32 = VERSION, zlib.crc32(head[:HEADER_CRC_OFFSET])
        return head[:HEADER_CRC_OFFSET] + struct.pack("<I", self.header_crc32)


def token_bytes_for(vocab_size: int) -> int:
    """uint16 when every id fits (the C++ writer uses the same rule), else uint32."""
    return 2 if vocab_size <= 1 << 16 else 4


class ShardWriter:
    """Streams documents into a shard: tokens go to a temporary file, the header is written last.

    Streaming keeps memory flat for multi-GB shards; the temporary file + os.replace makes the
    shard appear complete or not at all (a killed job never leaves a half shard the trainer reads).
    """

    def __init__(self, path: str | Path, vocab_size: int, eos_id: int, bos_id: int = NO_BOS):
        self.path = Path(path)
        self.header = ShardHeader(vocab_size, token_bytes_for(vocab_size), 0, 0, eos_id, bos_id, 0)
        self.dtype = np.dtype("<u2" if self.header.token_bytes == 2 else "<u4")
        self.tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(self.tmp, "wb")
        self.f.write(b"\0" * HEADER_BYTES)

    def add_document(self, ids) -> None:
        arr = np.asarray(ids, dtype=np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= self.header.vocab_size):
            raise DataPrepError(f"{self.path}: token id out of range [0, {self.header.vocab_size})")
        if arr.size == 0 or arr[-1] != self.header.eos_id:
            raise DataPrepError(f"{self.path}: every document must end with eos_id {self.header.eos_id}")
        data = arr.astype(self.dtype).tobytes()
        self.header.crc32 = zlib.crc32(data, self.header.crc32)
        self.header.n_tokens += arr.size
        self.header.n_documents += 1
        self.f.write(data)

    def close(self) -> ShardHeader:
        self.f.seek(0)
        self.f.write(self.header.pack())
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        os.replace(self.tmp, self.path)
        return self.header

    def abort(self) -> None:
        self.f.close()
        self.tmp.unlink(missing_ok=True)


def write_shard(path: str | Path, documents: Iterable, vocab_size: int, eos_id: int,
                bos_id: int = NO_BOS) -> ShardHeader:
    """Writes a whole shard from an iterable of documents (each a sequence of ids ending in EOS)."""
    w = ShardWriter(path, vocab_size, eos_id, bos_id)
    try:
        for doc in documents:
            w.add_document(doc)
    except BaseException:
        w.abort()
        raise
    return w.close()


def read_header(path: str | Path) -> ShardHeader:
    """Reads and validates the header and the file size (not the CRC: see read_shard)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except OSError as e:
        raise DataPrepError(f"{path}: cannot read shard: {e.strerror}") from None
    if len(raw) < HEADER_BYTES:
        raise DataPrepError(f"{path}: not a shard: {size} bytes, shorter than the 64-byte header")
    magic, version, hbytes, vocab, tbytes, n_tok, n_doc, eos, bos, crc, _, header_crc = _HEADER.unpack(raw)
    if magic != MAGIC:
        raise DataPrepError(f"{path}: not a shard: bad magic {magic!r}")
    if version not in (1, VERSION) or hbytes != HEADER_BYTES:
        raise DataPrepError(f"{path}: unsupported shard version {version} / header size {hbytes}")
    if version >= 2 and zlib.crc32(raw[:HEADER_CRC_OFFSET]) != header_crc:
        raise DataPrepError(f"{path}: corrupted shard header (CRC-32 {zlib.crc32(raw[:HEADER_CRC_OFFSET]):08x} of "
                            f"bytes 0..{HEADER_CRC_OFFSET - 1}, header says {header_crc:08x})")
    if tbytes not in (2, 4):
        raise DataPrepError(f"{path}: bad token_bytes {tbytes} (must be 2 or 4)")
    if any(raw[52:HEADER_CRC_OFFSET if version >= 2 else HEADER_BYTES]):
        raise DataPrepError(f"{path}: reserved header bytes are not zero")
    if size != HEADER_BYTES + n_tok * tbytes:
        raise DataPrepError(f"{path}: size {size} bytes, expected {HEADER_BYTES + n_tok * tbytes} "
                            f"for {n_tok} tokens of {tbytes} bytes (truncated or padded)")
    if vocab == 0 or eos >= vocab or (bos != NO_BOS and bos >= vocab):
        raise DataPrepError(f"{path}: eos_id/bos_id out of range for vocab_size {vocab}")
    return ShardHeader(vocab, tbytes, n_tok, n_doc, eos, bos, crc, version, header_crc if version >= 2 else 0)


def read_shard(path: str | Path, verify_checksum: bool = True) -> tuple[ShardHeader, np.ndarray]:
    """Memory-maps a shard and validates it as the C++ reader does; returns (header, tokens)."""
    h = read_header(path)
    dtype = np.dtype("<u2" if h.token_bytes == 2 else "<u4")
    if h.n_tokens == 0:
        tokens = np.zeros(0, dtype=dtype)
    else:
        tokens = np.memmap(path, dtype=dtype, mode="r", offset=HEADER_BYTES, shape=(h.n_tokens,))
    if verify_checksum:
        crc = 0
        view = tokens.view(np.uint8)
        for start in range(0, view.size, 1 << 24):
            crc = zlib.crc32(view[start:start + (1 << 24)], crc)
        if crc != h.crc32:
            raise DataPrepError(f"{path}: CRC-32 mismatch (header {h.crc32:#010x}, data {crc:#010x}): corrupt")
        if h.n_tokens and int(tokens.max()) >= h.vocab_size:
            pos = int(np.argmax(np.asarray(tokens) >= h.vocab_size))
            raise DataPrepError(f"{path}: token id {int(tokens[pos])} at position {pos} is outside the vocabulary "
                                f"[0, {h.vocab_size}) of the shard's header (vocab_size): the shard was written "
                                f"wrongly or for another tokenizer")
    return h, tokens


def shard_info_lines(path: str | Path) -> list[str]:
    """key=value lines in the format of `sinklab-shard info` (bos_id -1 for none, crc32 in hex)."""
    h, _ = read_shard(path)
    d = asdict(h)
    d["bos_id"] = -1 if h.bos_id == NO_BOS else h.bos_id
    d["crc32"] = f"{h.crc32:08x}"
    d["header_crc32"] = f"{h.header_crc32:08x}" if h.version >= 2 else "none"
    return [f"{k}={v}" for k, v in d.items()]


# ----------------------------------------------------------------------------------------------
# Building pre-training shards from Pile files.


def _unit(seed: int, *key) -> float:
    """A uniform [0, 1) number fixed by (seed, key): per-document decisions that do not depend on
    the number of workers or on the order in which documents reach them."""
    h = hashlib.blake2b(repr((seed,) + key).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2.0 ** 64


def parse_mixture(spec: str | None) -> dict[str, float]:
    """'Pile-CC=1,github=0.5,ArXiv=2' -> weights per domain key (unlisted domains keep 1.0).

    A weight w repeats a document floor(w) times plus once more with probability frac(w) -- the
    Pile's own "epochs" notion -- so 0 drops a domain and 0.5 keeps half of it.
    """
    weights = {k: 1.0 for k in DOMAIN_KEYS}
    if not spec:
        return weights
    for item in spec.split(","):
        name, sep, value = item.rpartition("=")
        key = domain_key(name.strip())
        try:
            w = float(value)
        except ValueError:
            w = -1.0
        if not sep or key is None or w < 0:
            raise DataPrepError(f"--mixture: bad item {item!r} (want DOMAIN=WEIGHT, WEIGHT >= 0, "
                                f"DOMAIN one of the 17 names or keys)")
        weights[key] = w
    return weights


_WORKER_TOK = None


def _worker_init(tokenizer_path: str) -> None:
    global _WORKER_TOK
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per process: we parallelise here
    _WORKER_TOK = load_tokenizer(tokenizer_path)


def _encode_batch(texts: list[str]) -> list[list[int]]:
    return _WORKER_TOK.encode_batch(texts)


def _batches(docs: Iterator, size: int) -> Iterator[list]:
    batch = []
    for d in docs:
        batch.append(d)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


@dataclass
class ShardBuildResult:
    headers: dict[str, ShardHeader]
    tokens_per_domain: dict[str, dict[str, int]]
    documents_per_domain: dict[str, dict[str, int]]
    report: SkipReport
    seconds: float


def build_shards(pile_paths: list, tokenizer_path, out_dir, *, valid_fraction: float = 0.01,
                 mixture: dict[str, float] | None = None, add_bos: bool = False,
                 pad_vocab_to: int = 0, workers: int = 1, seed: int = 0,
                 eos_override: str | None = None, bos_override: str | None = None,
                 batch_size: int = 256, progress_every: float = 5.0, quiet: bool = False,
                 train_name: str = "train.bin", valid_name: str = "valid.bin",
                 valid_domains: list[str] | None = None) -> ShardBuildResult:
    """Tokenises Pile files into train/valid shards: EOS after every document, BOS optional.

    The split is per document (a hash of seed, file and line), before mixture repetition, so that a
    repeated document never lands in both splits. Output order follows input order: shuffle the
    corpus beforehand if the trainer reads shards sequentially.

    valid_domains (names or keys, e.g. ["Pile-CC"]): also writes valid_<key>.bin per domain, the held-out
    documents of that domain once each whatever the mixture (the paper validates on Pile-CC:
    data/pile/valid_pile_cc.bin in its job files); result splits "valid_<key>".
    """
    t0 = time.time()
    tok = load_tokenizer(tokenizer_path)
    _, eos_id = eos_token(tok, eos_override)
    bos_id = bos_token(tok, bos_override)[1] if add_bos else NO_BOS
    vocab = tok.vocab_size
    if pad_vocab_to:
        if pad_vocab_to < vocab:
            raise DataPrepError(f"--pad-vocab-to {pad_vocab_to} is smaller than the tokenizer's "
                                f"vocabulary ({vocab}) in {tok.path}")
        vocab = pad_vocab_to
    if not 0.0 <= valid_fraction < 1.0:
        raise DataPrepError(f"--valid-fraction {valid_fraction} must be in [0, 1)")
    weights = mixture if mixture is not None else parse_mixture(None)
    report = SkipReport()
    out_dir = Path(out_dir)
    domain_splits = {}
    for name in valid_domains or []:
        key = domain_key(name.strip())
        if key is None:
            raise DataPrepError(f"--valid-domains: {name!r} is not one of the 17 Pile domain names or keys")
        domain_splits[key] = f"valid_{key}"
    writers = {"train": ShardWriter(out_dir / train_name, vocab, eos_id, bos_id),
               "valid": ShardWriter(out_dir / valid_name, vocab, eos_id, bos_id)}
    for split in domain_splits.values():
        writers[split] = ShardWriter(out_dir / f"{split}.bin", vocab, eos_id, bos_id)
    tokens = {s: {k: 0 for k in DOMAIN_KEYS} for s in writers}
    ndocs = {s: {k: 0 for k in DOMAIN_KEYS} for s in writers}

    def planned():
        """(split, domain, copies, text) for every document that is kept at least once."""
        for d in read_pile(pile_paths, report):
            split = "valid" if _unit(seed, "split", d.file_index, d.line) < valid_fraction else "train"
            w = weights.get(d.domain, 1.0)
            copies = int(w) + (_unit(seed, "mix", d.file_index, d.line) < w - int(w))
            if copies or (split == "valid" and d.domain in domain_splits):
                yield split, d.domain, copies, d.text

    pool = None
    try:
        if workers > 1:
            import multiprocessing as mp

            pool = mp.get_context("fork" if sys.platform == "linux" else "spawn").Pool(
                workers, initializer=_worker_init, initargs=(str(tok.path),))
            plan_batches = _batches(planned(), batch_size)
            # imap keeps input order, so the output does not depend on the number of workers.
            pairs = _zip_imap(pool, plan_batches)
        else:
            pairs = ((b, tok.encode_batch([x[3] for x in b])) for b in _batches(planned(), batch_size))
        last = time.time()
        prefix = [bos_id] if add_bos else []
        for batch, encoded in pairs:
            for (split, domain, copies, _), ids in zip(batch, encoded):
                doc = prefix + ids + [eos_id]
                for _ in range(copies):
                    writers[split].add_document(doc)
                    tokens[split][domain] += len(doc)
                    ndocs[split][domain] += 1
                if split == "valid" and domain in domain_splits:
                    writers[domain_splits[domain]].add_document(doc)
                    tokens[domain_splits[domain]][domain] += len(doc)
                    ndocs[domain_splits[domain]][domain] += 1
            if not quiet and time.time() - last >= progress_every:
                last = time.time()
                n_tok = sum(writers[s].header.n_tokens for s in ("train", "valid"))
                n_doc = sum(writers[s].header.n_documents for s in ("train", "valid"))
                print(f"shards: {n_doc:,} documents, {n_tok:,} tokens, "
                      f"{n_tok / (last - t0) / 1e6:.2f} M tokens/s", file=sys.stderr, flush=True)
        headers = {s: w.close() for s, w in writers.items()}
    except BaseException:
        for w in writers.values():
            if not w.f.closed:
                w.abort()
        raise
    finally:
        if pool is not None:
            pool.terminate()
    return ShardBuildResult(headers, tokens, ndocs, report, time.time() - t0)


def _zip_imap(pool, plan_batches):
    """Pairs each planned batch with its encoding while imap runs ahead in the workers."""
    import collections

    pending = collections.deque()

    def texts():
        for b in plan_batches:
            pending.append(b)
            yield [x[3] for x in b]

    for ids in pool.imap(_encode_batch, texts(), chunksize=1):
        yield pending.popleft(), ids
