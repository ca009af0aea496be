"""Streaming reader for Pile-format jsonl / jsonl.zst files.

Each line is ``{"text": ..., "meta": {"pile_set_name": ...}}``. The paper (App. B.2) uses the 17 Pile
domains that are still distributed; the others (OpenWebText2, Books3, ...) are skipped *and counted*.
Nothing is silently eaten: every skipped line is counted under one reason, and the first few line
numbers of each reason are kept, so a user can find and fix a corrupt file.
"""

from __future__ import annotations

import io
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from . import DataPrepError

# (pile_set_name exactly as in the Pile's meta field, key used for HDF5 groups / manifests), in the
# order App. B.2 lists them.
DOMAINS: tuple[tuple[str, str], ...] = (
    ("Pile-CC", "pile_cc"),
    ("PubMed Central", "pubmed_central"),
    ("ArXiv", "arxiv"),
    ("Github", "github"),
    ("FreeLaw", "freelaw"),
    ("StackExchange", "stackexchange"),
    ("USPTO Backgrounds", "uspto_backgrounds"),
    ("PubMed Abstracts", "pubmed_abstracts"),
    ("Gutenberg (PG-19)", "gutenberg_pg19"),
    ("Wikipedia (en)", "wikipedia_en"),
    ("DM Mathematics", "dm_mathematics"),
    ("Ubuntu IRC", "ubuntu_irc"),
    ("EuroParl", "europarl"),
    ("HackerNews", "hackernews"),
    ("PhilPapers", "philpapers"),
    ("NIH ExPorter", "nih_exporter"),
    ("Enron Emails", "enron_emails"),
)
SET_NAME_TO_KEY: dict[str, str] = dict(DOMAINS)
KEY_TO_SET_NAME: dict[str, str] = {k: n for n, k in DOMAINS}
DOMAIN_KEYS: tuple[str, ...] = tuple(k for _, k in DOMAINS)

# Spellings seen in Pile mirrors and in the paper's own text, normalised to the canonical name.
_ALIASES = {
    "Stack Exchange": "StackExchange",
    "Pubmed Abstracts": "PubMed Abstracts",
    "Gutenberg": "Gutenberg (PG-19)",
    "PG-19": "Gutenberg (PG-19)",
    "Wikipedia": "Wikipedia (en)",
    "Hacker News": "HackerNews",
}


def domain_key(set_name: str) -> str | None:
    """Maps a pile_set_name (or a domain key) to its domain key, or None if it is not one of the 17."""
    name = _ALIASES.get(set_name, set_name)
    if name in SET_NAME_TO_KEY:
        return SET_NAME_TO_KEY[name]
    return set_name if set_name in KEY_TO_SET_NAME else None


@dataclass
class Document:
    """One accepted line: its domain key, its text, and where it came from (for provenance)."""

    domain: str
    text: str
    file_index: int
    line: int


@dataclass
class SkipReport:
    """Counts of skipped lines per reason, with the first few locations of each.

    Kept as a separate object (not log lines) so that tests and the CLI can both assert on it and so
    that several readers (Pile, UltraChat) report in the same format.
    """

    what: str = "lines"
    max_examples: int = 5
    accepted: int = 0
    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    other_set_names: Counter = field(default_factory=Counter)

    def skip(self, reason: str, where: str) -> None:
        self.counts[reason] += 1
        ex = self.examples.setdefault(reason, [])
        if len(ex) < self.max_examples:
            ex.append(where)

    @property
    def skipped(self) -> int:
        return sum(self.counts.values())

    def lines(self) -> list[str]:
        """Human-readable summary, one reason per line (what the CLI prints to stderr)."""
        out = [f"read {self.accepted + self.skipped} {self.what}: {self.accepted} accepted, "
               f"{self.skipped} skipped"]
        for reason, n in sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0])):
            first = ", ".join(self.examples.get(reason, []))
            out.append(f"  skipped {n} ({reason}); first at {first}")
        if self.other_set_names:
            names = ", ".join(f"{k}={v}" for k, v in self.other_set_names.most_common())
            out.append(f"  pile_set_name values outside the 17 domains: {names}")
        return out

    def print(self, prefix: str, stream=None) -> None:
        stream = stream if stream is not None else sys.stderr
        for line in self.lines():
            print(f"{prefix}: {line}", file=stream)

    def to_dict(self) -> dict:
        return {"accepted": self.accepted, "skipped": dict(self.counts),
                "first_examples": self.examples, "other_set_names": dict(self.other_set_names)}


def open_lines(path: str | Path) -> Iterator[bytes]:
    """Yields raw lines (bytes) of a .jsonl or .jsonl.zst file, streaming (the Pile is 800 GB).

    Lines are yielded as bytes so that an invalid UTF-8 line can be counted and skipped on its own
    instead of aborting the whole file.
    """
    path = Path(path)
    try:
        raw = open(path, "rb")
    except OSError as e:
        raise DataPrepError(f"{path}: cannot open: {e.strerror}") from None
    with raw:
        if path.suffix != ".zst":
            yield from raw
            return
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        try:
            yield from io.BufferedReader(reader, buffer_size=1 << 20)
        except zstandard.ZstdError as e:
            raise DataPrepError(f"{path}: corrupt zstd stream: {e}") from None


def parse_json_line(raw: bytes, where: str, report: SkipReport) -> dict | None:
    """Decodes one line to a dict, or counts why not. Blank lines count too: they are not data."""
    if not raw.strip():
        report.skip("blank line", where)
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        report.skip("invalid UTF-8", where)
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        report.skip("invalid JSON", where)
        return None
    if not isinstance(obj, dict):
        report.skip("JSON value is not an object", where)
        return None
    return obj


def read_pile(paths: Iterable[str | Path], report: SkipReport | None = None,
              domains: Iterable[str] | None = None) -> Iterator[Document]:
    """Streams the accepted documents of Pile files, in file and line order.

    ``domains`` restricts the output to some domain keys (others are skipped, counted as
    'domain not selected'). Line numbers are 1-based, as editors show them.
    """
    report = report if report is not None else SkipReport()
    wanted = set(domains) if domains is not None else None
    for fi, path in enumerate(paths):
        for lineno, raw in enumerate(open_lines(path), start=1):
            where = f"{Path(path).name}:{lineno}"
            obj = parse_json_line(raw, where, report)
            if obj is None:
                continue
            text = obj.get("text")
            if text is None:
                report.skip("missing 'text'", where)
                continue
            if not isinstance(text, str):
                report.skip("'text' is not a string", where)
                continue
            if not text.strip():
                report.skip("empty text", where)
                continue
            meta = obj.get("meta")
            set_name = meta.get("pile_set_name") if isinstance(meta, dict) else None
            if not isinstance(set_name, str):
                report.skip("missing meta.pile_set_name", where)
                continue
            key = domain_key(set_name)
            if key is None:
                report.skip("pile_set_name not among the 17 domains", where)
                report.other_set_names[set_name] += 1
                continue
            if wanted is not None and key not in wanted:
                report.skip("domain not selected", where)
                continue
            report.accepted += 1
            yield Document(key, text, fi, lineno)


def count_domains(paths: Iterable[str | Path], report: SkipReport | None = None) -> dict[str, dict]:
    """Documents and characters per domain (all 17 keys present, zeros included)."""
    stats = {k: {"documents": 0, "chars": 0} for k in DOMAIN_KEYS}
    for doc in read_pile(paths, report):
        stats[doc.domain]["documents"] += 1
        stats[doc.domain]["chars"] += len(doc.text)
    return stats


def write_pile(path: str | Path, docs: Iterable[tuple[str, str]], level: int = 10) -> int:
    """Writes (domain key or set name, text) pairs as Pile jsonl (.zst if the name says so).

    Single-threaded zstd at a fixed level so that the same documents give the same bytes (the mini
    corpus manifest relies on that). Written atomically. Returns the number of documents.
    """
    import os

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with open(tmp, "wb") as raw:
        if path.suffix == ".zst":
            import zstandard

            out = zstandard.ZstdCompressor(level=level, threads=0).stream_writer(raw, closefd=False)
        else:
            out = raw
        for domain, text in docs:
            set_name = KEY_TO_SET_NAME.get(domain, domain)
            line = json.dumps({"text": text, "meta": {"pile_set_name": set_name}}, ensure_ascii=False)
            out.write(line.encode("utf-8") + b"\n")
            n += 1
        if out is not raw:
            out.close()
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(tmp, path)
    return n
