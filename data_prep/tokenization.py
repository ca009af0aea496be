"""Loading HF tokenizers from model directories, and the special-token policy.

Named tokenization.py (not tokenize.py) so that it can never shadow the standard library's tokenize.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from . import DataPrepError

# model_type -> default for the *first* special token when neither tokenizer file says otherwise.
# "bos" means the tokenizer's bos_token; a literal string is that token; None means no prefix.
_FAMILY_PREFIX = {
    "llama": "bos", "mistral": "bos", "mixtral": "bos", "gemma": "bos", "gemma2": "bos",
    "opt": "</s>",
    "gpt2": None, "gpt_neox": None, "gptj": None, "gpt_neo": None, "jamba": "bos",
}


@dataclass(frozen=True)
class Tokenizer:
    """A loaded tokenizer and the files it came from (for provenance attrs)."""

    tok: object  # tokenizers.Tokenizer
    path: Path  # the tokenizer.json
    model_dir: Path | None  # directory with config.json / tokenizer_config.json, if any
    sha256: str

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    def token_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        """Ids of the text alone: special tokens are added by the caller, explicitly."""
        return self.tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_json(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataPrepError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(data, dict):
        raise DataPrepError(f"{path}: expected a JSON object")
    return data


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Loads a tokenizer from a model directory (with tokenizer.json) or a tokenizer.json file."""
    from tokenizers import Tokenizer as HFTokenizer

    path = Path(path)
    model_dir = path if path.is_dir() else path.parent
    tok_path = path / "tokenizer.json" if path.is_dir() else path
    if not tok_path.exists():
        raise DataPrepError(f"{tok_path}: no tokenizer.json (pass a model directory or the file)")
    try:
        tok = HFTokenizer.from_file(str(tok_path))
    except Exception as e:  # tokenizers raises plain Exception subclasses
        raise DataPrepError(f"{tok_path}: cannot load tokenizer: {e}") from None
    return Tokenizer(tok, tok_path, model_dir, sha256_file(tok_path))


def _token_content(value) -> str | None:
    """tokenizer_config.json spells special tokens as strings or as AddedToken dicts."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


@dataclass(frozen=True)
class SpecialTokenPolicy:
    """What goes in front of every sequence fed to a model, and why (stored as provenance)."""

    family: str
    prefix_token: str | None
    prefix_id: int | None
    rule: str  # which source decided: see special_token_policy

    def describe(self) -> str:
        what = f"prepend {self.prefix_token!r} (id {self.prefix_id})" if self.prefix_token else "no prefix"
        return f"{self.family}: {what}; decided by {self.rule}"


def special_token_policy(tokenizer: Tokenizer, override: str = "auto") -> SpecialTokenPolicy:
    """Decides the tokenizer's default leading special token, as HF would add it for a plain prompt.

    The survey measures the sink on the first position, so this decides what the first token *is*;
    it must match what the model saw in pre-training. Order of evidence (first that applies wins):

    1. ``override``: "none" or a literal token (from the CLI), for models this logic gets wrong.
    2. tokenizer_config.json ``add_bos_token``: true -> its ``bos_token`` (Llama-2, Mistral, and OPT,
       whose bos_token is ``</s>``); false -> no prefix (GPT-2 in recent HF versions).
    3. tokenizer.json post_processor: a TemplateProcessing whose single-sequence template starts
       with a special token -> that token (Llama-3's ``<|begin_of_text|>``).
    4. config.json ``model_type``: llama/mistral/mixtral/gemma/jamba -> bos_token (default ``<s>``),
       opt -> ``</s>``, gpt2/gpt_neox/gptj/gpt_neo (GPT-2, Pythia) -> no prefix.

    Anything else is an error: guessing the first token silently would bias the measurement.
    """
    cfg_dir = tokenizer.model_dir
    config = _read_json(cfg_dir / "config.json") if cfg_dir else {}
    tcfg = _read_json(cfg_dir / "tokenizer_config.json") if cfg_dir else {}
    family = str(config.get("model_type", "unknown"))
    bos_token = _token_content(tcfg.get("bos_token"))

    def resolve(token: str | None, rule: str) -> SpecialTokenPolicy:
        if token is None:
            return SpecialTokenPolicy(family, None, None, rule)
        tid = tokenizer.token_id(token)
        if tid is None:
            raise DataPrepError(f"{tokenizer.path}: special token {token!r} ({rule}) is not in the vocabulary")
        return SpecialTokenPolicy(family, token, tid, rule)

    if override != "auto":
        return resolve(None if override == "none" else override, "command-line override")
    if "add_bos_token" in tcfg:
        if tcfg["add_bos_token"]:
            if bos_token is None:
                raise DataPrepError(f"{cfg_dir / 'tokenizer_config.json'}: add_bos_token is true but bos_token is unset")
            return resolve(bos_token, "tokenizer_config.json add_bos_token=true")
        return resolve(None, "tokenizer_config.json add_bos_token=false")
    post = tokenizer.tok.to_str()
    post = json.loads(post).get("post_processor") or {}
    for proc in [post] + list(post.get("processors", []) if post.get("type") == "Sequence" else []):
        if proc.get("type") == "TemplateProcessing" and proc.get("single"):
            first = proc["single"][0]
            if "SpecialToken" in first:
                return resolve(first["SpecialToken"]["id"], "tokenizer.json TemplateProcessing")
    if family in _FAMILY_PREFIX:
        prefix = _FAMILY_PREFIX[family]
        if prefix == "bos":
            prefix = bos_token or "<s>"
        return resolve(prefix, f"config.json model_type={family}")
    raise DataPrepError(
        f"{cfg_dir / 'config.json'}: cannot decide the leading special token for model_type "
        f"{family!r}; pass --bos-policy none or --bos-policy TOKEN")


def eos_token(tokenizer: Tokenizer, override: str | None = None) -> tuple[str, int]:
    """The document separator: --eos-token, else tokenizer_config.json eos_token, else a known name."""
    tcfg = _read_json(tokenizer.model_dir / "tokenizer_config.json") if tokenizer.model_dir else {}
    candidates = [override] if override else [_token_content(tcfg.get("eos_token")),
                                              "<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>"]
    for tok in candidates:
        if tok is not None and tokenizer.token_id(tok) is not None:
            return tok, tokenizer.token_id(tok)
    raise DataPrepError(f"{tokenizer.path}: no EOS token found (tried {[c for c in candidates if c]}); "
                        "pass --eos-token")


def bos_token(tokenizer: Tokenizer, override: str | None = None) -> tuple[str, int]:
    """The token --bos prepends to pre-training documents (tokenizer_config bos_token or a known name)."""
    tcfg = _read_json(tokenizer.model_dir / "tokenizer_config.json") if tokenizer.model_dir else {}
    candidates = [override] if override else [_token_content(tcfg.get("bos_token")),
                                              "<|bos|>", "<s>", "<|begin_of_text|>", "<bos>"]
    for tok in candidates:
        if tok is not None and tokenizer.token_id(tok) is not None:
            return tok, tokenizer.token_id(tok)
    raise DataPrepError(f"{tokenizer.path}: no BOS token found (tried {[c for c in candidates if c]}); "
                        "pass --bos-token")
