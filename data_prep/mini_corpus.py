"""The embedded mini corpus: a small Pile-format corpus from Debian-packaged text, its tokenizer,
shards and survey inputs -- the default data of the demo and of the tests.

Real Pile domains cannot be shipped; each of the 17 is stood in for by Debian-packaged text of a
similar register (sources.SOURCES, table in data_prep/README.md) plus generated arithmetic for
DM Mathematics. Every domain is capped at the same number of characters so that none dominates.

Outputs (``--out``, default data/mini)::

    pile_mini.jsonl.zst        the corpus, documents shuffled across domains (seeded)
    tokenizer/tokenizer.json   byte-level BPE, <|endoftext|> = 0 (EOS), <|bos|> = 1
    tokenizer/{tokenizer_config,config}.json   so the directory works as a GPT-2-like model dir
    train.bin, valid.bin       token shards (src/io/shard.hpp), EOS after each document, no BOS
    survey_inputs.h5           100 x 64 tokens per domain, no BOS (the GPT-2-like policy)
    manifest.json              parameters, sources + package versions, counts, sha256 of outputs

Rebuilding is skipped when manifest.json has the same parameters and every output still has the
sha256 the manifest records.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

from . import DataPrepError, __version__
from .pile import DOMAIN_KEYS, KEY_TO_SET_NAME, write_pile
from .shards import build_shards
from .sources import SOURCES, CHANGELOG_PACKAGES, package_version, pieces_for, python_stdlib_package
from .survey_inputs import build_survey_inputs
from .tokenization import sha256_file

EOS, BOS = "<|endoftext|>", "<|bos|>"
OUTPUTS = ("pile_mini.jsonl.zst", "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json",
           "tokenizer/config.json", "train.bin", "valid.bin", "survey_inputs.h5")


def _log(msg: str) -> None:
    print(f"mini-corpus: {msg}", file=sys.stderr, flush=True)


# ---- DM Mathematics stand-in ----


def math_document(rng: random.Random, n_problems: int = 12) -> str:
    """Question/answer pairs in the style of DeepMind's mathematics dataset (one per two lines)."""
    out = []
    for _ in range(n_problems):
        kind = rng.randrange(8)
        a, b, c = rng.randint(-999, 999), rng.randint(-99, 99), rng.randint(2, 30)
        if kind == 0:
            q, ans = f"What is {a} + {b}?", a + b
        elif kind == 1:
            q, ans = f"Calculate {a} - {b}.", a - b
        elif kind == 2:
            q, ans = f"What is {b} times {c}?", b * c
        elif kind == 3:
            x = rng.randint(-20, 20)
            q, ans = f"Solve {c}*x + {b} = {c * x + b} for x.", x
        elif kind == 4:
            q, ans = f"What is the remainder when {abs(a)} is divided by {c}?", abs(a) % c
        elif kind == 5:
            x = rng.randint(-9, 9)
            q, ans = f"Let f(x) = {c}*x**2 + {b}*x - 3. What is f({x})?", c * x * x + b * x - 3
        elif kind == 6:
            vals = rng.sample(range(-50, 50), 4)
            q, ans = f"Sort {', '.join(map(str, vals))} in increasing order.", ", ".join(map(str, sorted(vals)))
        else:
            v = rng.uniform(-100, 100)
            q, ans = f"Round {v:.5f} to two decimal places.", f"{v:.2f}"
        out.append(f"{q}\n{ans}")
    return "\n".join(out) + "\n"


# ---- documents per domain ----


def _split_long(text: str, max_chars: int) -> list[str]:
    """Cuts a long piece at paragraph (else line) boundaries into chunks of at most ~max_chars."""
    if len(text) <= max_chars:
        return [text]
    chunks, cur = [], ""
    for para in text.split("\n\n"):
        while len(para) > max_chars:
            cut = para.rfind("\n", 0, max_chars)
            cut = cut if cut > max_chars // 4 else max_chars
            chunks.append((cur + "\n\n" + para[:cut]).strip() if cur else para[:cut])
            cur, para = "", para[cut:].lstrip("\n")
        if cur and len(cur) + len(para) + 2 > max_chars:
            chunks.append(cur)
            cur = para
        else:
            cur = f"{cur}\n\n{para}" if cur else para
    if cur.strip():
        chunks.append(cur)
    return [c.strip() for c in chunks if c.strip()]


def domain_documents(domain: str, max_chars: int, seed: int, min_doc: int = 600,
                     max_doc: int = 6000) -> list[str]:
    """Documents of one domain: a seeded sample of its pieces up to max_chars characters in all,
    long pieces cut to <= max_doc characters, short ones merged up to >= min_doc characters
    (so that every document has well over 64 tokens for the survey inputs)."""
    rng = random.Random(f"{seed}:{domain}")
    if domain == "dm_mathematics":
        pieces = []
        total = 0
        while total < max_chars:
            pieces.append(math_document(rng))
            total += len(pieces[-1])
    else:
        pieces = [c for p in pieces_for(domain) for c in _split_long(p.strip(), max_doc) if c]
        rng.shuffle(pieces)
    docs, cur, total = [], "", 0
    for p in pieces:
        if total >= max_chars:
            break
        cur = f"{cur}\n\n{p}" if cur else p
        if len(cur) >= min_doc:
            docs.append(cur)
            total += len(cur)
            cur = ""
    if cur and total < max_chars:
        docs.append(cur)
    return docs


# ---- tokenizer ----


def train_tokenizer(corpus_docs: list[str], vocab_size: int, out_dir: Path) -> Path:
    """Byte-level BPE trained on the corpus. BpeTrainer is deterministic for a fixed input order."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS, BOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus_docs, trainer=trainer, length=len(corpus_docs))
    out_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(out_dir / "tokenizer.json", tok.to_str())
    _atomic_write(out_dir / "tokenizer_config.json", json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
        "unk_token": EOS, "add_bos_token": False, "model_max_length": 2048}, indent=2) + "\n")
    _atomic_write(out_dir / "config.json", json.dumps({
        "model_type": "gpt2", "vocab_size": tok.get_vocab_size(), "bos_token_id": tok.token_to_id(BOS),
        "eos_token_id": tok.token_to_id(EOS),
        "_comment": "tokenizer-only directory of the sinklab mini corpus: GPT-2-like, no BOS"}, indent=2) + "\n")
    return out_dir / "tokenizer.json"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ---- the command ----


def parameters(args_dict: dict) -> dict:
    """Everything the outputs depend on; a change forces a rebuild."""
    pkgs = sorted({p for pk, _ in SOURCES.values() for p in pk if not p.startswith("*")}
                  | set(CHANGELOG_PACKAGES) | {python_stdlib_package()})
    return {"data_prep_version": __version__, **args_dict,
            "packages": {p: package_version(p) for p in pkgs}}


def up_to_date(out: Path, params: dict) -> bool:
    try:
        manifest = json.loads((out / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    if manifest.get("parameters") != params:
        return False
    return all((out / name).exists() and sha256_file(out / name) == manifest["sha256"].get(name)
               for name in OUTPUTS)


def build_mini_corpus(out: str | Path = "data/mini", *, max_chars_per_domain: int = 1_000_000,
                      vocab_size: int = 4096, valid_fraction: float = 0.02, survey_n: int = 100,
                      T: int = 64, seed: int = 1234, workers: int = 0, force: bool = False) -> dict:
    """Builds everything from scratch (or says it is up to date); returns the manifest."""
    t0 = time.time()
    out = Path(out)
    workers = workers or min(os.cpu_count() or 1, 8)
    params = parameters({"max_chars_per_domain": max_chars_per_domain, "vocab_size": vocab_size,
                         "valid_fraction": valid_fraction, "survey_n": survey_n, "T": T, "seed": seed})
    if not force and up_to_date(out, params):
        _log(f"{out}/manifest.json matches the parameters and every output's sha256: up to date, skipping")
        return json.loads((out / "manifest.json").read_text())
    out.mkdir(parents=True, exist_ok=True)

    docs: list[tuple[str, str]] = []
    stats: dict[str, dict] = {}
    for domain in DOMAIN_KEYS:
        dd = domain_documents(domain, max_chars_per_domain, seed)
        if not dd:
            raise DataPrepError(f"mini corpus: no text for domain {KEY_TO_SET_NAME[domain]!r} "
                                f"(packages {SOURCES[domain][0]}); run `bash env/setup.sh`")
        docs += [(domain, d) for d in dd]
        stats[domain] = {"pile_set_name": KEY_TO_SET_NAME[domain], "documents": len(dd),
                         "chars": sum(map(len, dd))}
    random.Random(seed).shuffle(docs)
    corpus = out / "pile_mini.jsonl.zst"
    write_pile(corpus, docs)
    _log(f"corpus: {len(docs)} documents, {sum(s['chars'] for s in stats.values()) / 1e6:.1f} M chars "
         f"({time.time() - t0:.0f} s)")

    train_tokenizer([d for _, d in docs], vocab_size, out / "tokenizer")
    _log(f"tokenizer: byte-level BPE, vocab {vocab_size} ({time.time() - t0:.0f} s)")

    res = build_shards([corpus], out / "tokenizer", out, valid_fraction=valid_fraction,
                       workers=workers, seed=seed, quiet=True)
    if res.report.skipped:
        raise DataPrepError(f"{corpus}: {res.report.skipped} lines skipped while sharding: {res.report.lines()}")
    for d in DOMAIN_KEYS:
        stats[d]["train_tokens"] = res.tokens_per_domain["train"][d]
        stats[d]["valid_tokens"] = res.tokens_per_domain["valid"][d]
    _log(f"shards: train {res.headers['train'].n_tokens:,} tokens, valid {res.headers['valid'].n_tokens:,} "
         f"({time.time() - t0:.0f} s)")

    survey = build_survey_inputs([corpus], [out / "tokenizer"], out=str(out / "survey_inputs.h5"),
                                 n=survey_n, T=T, seed=seed, quiet=True)
    for d, n in next(iter(survey.values())).items():
        stats[d]["survey_rows"] = n
    _log(f"survey inputs: {sum(next(iter(survey.values())).values())} rows of {T} tokens "
         f"({time.time() - t0:.0f} s)")

    manifest = {
        "parameters": params,
        "sources": {d: {"packages": list(SOURCES[d][0]), "stands_in_with": SOURCES[d][1]} for d in DOMAIN_KEYS},
        "domains": stats,
        "totals": {"documents": len(docs), "train_tokens": res.headers["train"].n_tokens,
                   "valid_tokens": res.headers["valid"].n_tokens, "vocab_size": vocab_size,
                   "eos_id": res.headers["train"].eos_id},
        "sha256": {name: sha256_file(out / name) for name in OUTPUTS},
        "build_seconds": round(time.time() - t0, 1),
    }
    _atomic_write(out / "manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    _log(f"done in {time.time() - t0:.0f} s: {out}/manifest.json")
    return manifest
