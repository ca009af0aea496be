"""Tiny synthetic inputs (model directories per tokenizer family, Pile and UltraChat files).

Used by tests/python/test_data_prep*.py; kept in the package so that other test suites (C++
integration tests, the survey) can build the same fixtures with one call.
"""

from __future__ import annotations

import json
from pathlib import Path

from .pile import DOMAIN_KEYS, write_pile

WORDS = ("the a of to and in is it that for on with as was at by be this from or an are not "
         "sink attention token model layer head value key query first data domain law code math "
         "paper court email chat user answer question one two three four five six seven eight nine "
         "ten plus minus equals").split()

# family -> (config.json model_type, special tokens in id order, tokenizer_config.json, template)
FAMILIES = {
    "llama": ("llama", ["<unk>", "<s>", "</s>"],
              {"add_bos_token": True, "bos_token": "<s>", "eos_token": "</s>"}, None),
    "llama3": ("llama", ["<|begin_of_text|>", "<|end_of_text|>", "<unk>"],
               {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, "<|begin_of_text|>"),
    "mistral": ("mistral", ["<unk>", "<s>", "</s>"], {"bos_token": "<s>", "eos_token": "</s>"}, None),
    "opt": ("opt", ["<s>", "<pad>", "</s>", "<unk>"], {"bos_token": "</s>", "eos_token": "</s>"}, None),
    "gpt2": ("gpt2", ["<|endoftext|>", "<unk>"],
             {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}, None),
    "pythia": ("gpt_neox", ["<|endoftext|>", "<|padding|>", "<unk>"],
               {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}, None),
}


def make_model_dir(path: str | Path, family: str) -> Path:
    """A model directory (config.json, tokenizer.json, tokenizer_config.json) with a WordLevel
    tokenizer over WORDS and the special tokens of a real family, in that family's id order."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    model_type, specials, tcfg, template = FAMILIES[family]
    vocab = {t: i for i, t in enumerate(specials)}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    unk = "<unk>"
    tok = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(specials)
    if template:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{template} $A", pair=f"{template} $A {template} $B",
            special_tokens=[(template, vocab[template])])
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    (path / "config.json").write_text(json.dumps({"model_type": model_type, "vocab_size": len(vocab)}))
    (path / "tokenizer_config.json").write_text(json.dumps(tcfg))
    return path


def sentence(i: int, n_words: int) -> str:
    """Deterministic text over WORDS (every word is in every fixture vocabulary)."""
    return " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(n_words))


def make_pile(path: str | Path, docs_per_domain: int = 3, n_words: int = 80,
              domains=DOMAIN_KEYS) -> Path:
    """A Pile file (.jsonl or .jsonl.zst by name) with docs_per_domain documents per domain."""
    docs = [(d, sentence(i * 31 + k, n_words)) for k, d in enumerate(domains) for i in range(docs_per_domain)]
    write_pile(path, docs)
    return Path(path)
