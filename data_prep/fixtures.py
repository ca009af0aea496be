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


def make_model_dir(path: str | Path, family: str, form: str = "tokenizer.json") -> Path:
    """A model directory (config.json, tokenizer_config.json and the tokenizer) with the special tokens
    of a real family, in that family's id order. form:

    - "tokenizer.json": a WordLevel tokenizer over WORDS (the family's template, if any, included);
    - "bpe": vocab.json + merges.txt, a byte-level BPE trained on sentences of WORDS (GPT-2, OPT);
    - "sentencepiece": tokenizer.model, a sentencepiece BPE trained on the same sentences, with the
      family's <unk>/<s>/</s> as sentencepiece's own unk/bos/eos (LLaMA-2, Mistral).
    """
    model_type, specials, tcfg, template = FAMILIES[family]
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if form == "tokenizer.json":
        size = _word_level(path, specials, template)
    elif form == "bpe":
        size = _byte_level_bpe(path, specials)
    elif form == "sentencepiece":
        size = _sentencepiece(path, specials)
    else:
        raise ValueError(f"unknown tokenizer form {form!r}")
    (path / "config.json").write_text(json.dumps({"model_type": model_type, "vocab_size": size}))
    (path / "tokenizer_config.json").write_text(json.dumps(tcfg))
    return path


def _word_level(path: Path, specials: list, template: str | None) -> int:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {t: i for i, t in enumerate(specials)}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(specials)
    if template:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{template} $A", pair=f"{template} $A {template} $B",
            special_tokens=[(template, vocab[template])])
    tok.save(str(path / "tokenizer.json"))
    return len(vocab)


def _training_text() -> list:
    return [sentence(i, 12) for i in range(200)]


def _byte_level_bpe(path: Path, specials: list) -> int:
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(_training_text(), vocab_size=len(specials) + 256 + 64, min_frequency=2,
                            special_tokens=specials, show_progress=False)
    tok.save_model(str(path))
    return tok.get_vocab_size()


def _sentencepiece(path: Path, specials: list) -> int:
    import io

    import sentencepiece as spm

    if specials != ["<unk>", "<s>", "</s>"]:
        raise ValueError(f"a sentencepiece fixture needs <unk>, <s>, </s> as ids 0-2, not {specials}")
    model = io.BytesIO()
    # LLaMA-2's trainer settings where they matter for encoding (no normalisation, whitespace kept,
    # a dummy prefix, digits split); no byte fallback, which would need 256 more pieces.
    spm.SentencePieceTrainer.train(sentence_iterator=iter(_training_text()), model_writer=model, vocab_size=80,
                                   model_type="bpe", character_coverage=1.0, unk_id=0, bos_id=1, eos_id=2,
                                   pad_id=-1, normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   add_dummy_prefix=True, split_digits=True, num_threads=1, minloglevel=2)
    (path / "tokenizer.model").write_bytes(model.getvalue())
    return spm.SentencePieceProcessor(model_proto=model.getvalue()).get_piece_size()


def sentence(i: int, n_words: int) -> str:
    """Deterministic text over WORDS (every word is in every fixture vocabulary)."""
    return " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(n_words))


def make_pile(path: str | Path, docs_per_domain: int = 3, n_words: int = 80,
              domains=DOMAIN_KEYS) -> Path:
    """A Pile file (.jsonl or .jsonl.zst by name) with docs_per_domain documents per domain."""
    docs = [(d, sentence(i * 31 + k, n_words)) for k, d in enumerate(domains) for i in range(docs_per_domain)]
    write_pile(path, docs)
    return Path(path)
