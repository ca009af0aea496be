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


# The files that define a model directory's tokenizer, in the order they are looked for: the first
# form present wins (LLaMA-2 repositories ship tokenizer.json and tokenizer.model; facebook/opt-* only
# vocab.json + merges.txt).
TOKENIZER_FORMS = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"))


def tokenizer_files(path: str | Path) -> tuple[Path, ...]:
    """The files of the first tokenizer form in a model directory (or the directory of a named file)."""
    path = Path(path)
    d = path if path.is_dir() else path.parent
    if not path.is_dir() and path.name == "tokenizer.json":  # an explicitly named tokenizer.json
        return (path,) if path.exists() else ()
    for form in TOKENIZER_FORMS:
        if all((d / f).is_file() for f in form):
            return tuple(d / f for f in form)
    return ()


def tokenizer_fingerprint(files: tuple[Path, ...]) -> str:
    """What survey inputs are matched to a model by (src/probe/survey_run.cpp computes the same): the
    sha256 of the one file (tokenizer.json, tokenizer.model), or of several files' sha256sum lines
    ("<sha256>  <name>\\n" each, in TOKENIZER_FORMS order)."""
    if len(files) == 1:
        return sha256_file(files[0])
    lines = "".join(f"{sha256_file(f)}  {f.name}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()


class _HfBackend:
    """A tokenizers.Tokenizer (tokenizer.json, or vocab.json + merges.txt built into one)."""

    def __init__(self, tok):
        self.tok = tok

    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    def token_id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=False)

    def post_processor(self) -> dict:
        return json.loads(self.tok.to_str()).get("post_processor") or {}


class _SentencePieceBackend:
    """sentencepiece's own processor for tokenizer.model (LLaMA-2), as transformers' LlamaTokenizer uses
    it: encode() adds no BOS/EOS unless asked, and the caller adds them explicitly."""

    def __init__(self, sp):
        self.sp = sp

    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def token_id(self, token: str) -> int | None:
        i = self.sp.piece_to_id(token)  # unknown pieces map to unk's id
        return i if self.sp.id_to_piece(i) == token else None

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts)

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode(ids)

    def post_processor(self) -> dict:
        return {}


@dataclass(frozen=True)
class Tokenizer:
    """A loaded tokenizer and the files it came from (for provenance attrs)."""

    backend: object  # _HfBackend or _SentencePieceBackend
    path: Path  # the first defining file (tokenizer.json, tokenizer.model or vocab.json)
    model_dir: Path | None  # directory with config.json / tokenizer_config.json, if any
    sha256: str  # tokenizer_fingerprint(files)
    files: tuple = ()  # every defining file

    @property
    def vocab_size(self) -> int:
        return self.backend.vocab_size()

    def token_id(self, token: str) -> int | None:
        return self.backend.token_id(token)

    def encode(self, text: str) -> list[int]:
        """Ids of the text alone: special tokens are added by the caller, explicitly."""
        return self.backend.encode_batch([text])[0]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.backend.encode_batch(texts)

    def decode(self, ids: list[int]) -> str:
        """Text of ids, special tokens included."""
        return self.backend.decode(ids)


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


def _byte_level_bpe(vocab: Path, merges: Path, tcfg: dict):
    """GPT-2/OPT's tokenizer from vocab.json + merges.txt, as transformers converts it (byte-level
    pre-tokenizer with GPT-2's regex, BPE without dropout or affixes); the special tokens that
    tokenizer_config.json / special_tokens_map.json name are kept whole, as the slow tokenizer does."""
    from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

    tok = HFTokenizer(models.BPE.from_file(str(vocab), str(merges), fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=bool(tcfg.get("add_prefix_space", False)))
    tok.decoder = decoders.ByteLevel()
    smap = _read_json(vocab.parent / "special_tokens_map.json")
    named = [_token_content(cfg.get(k)) for cfg in (tcfg, smap)
             for k in ("bos_token", "eos_token", "unk_token", "pad_token")]
    named += [_token_content(v) for v in (tcfg.get("added_tokens_decoder") or {}).values()]
    specials = sorted({t for t in named if t is not None and tok.token_to_id(t) is not None})
    tok.add_special_tokens(specials)
    return tok


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Loads a tokenizer from a model directory or one of its defining files: tokenizer.json (the
    tokenizers library), tokenizer.model (sentencepiece) or vocab.json + merges.txt (byte-level BPE)."""
    path = Path(path)
    model_dir = path if path.is_dir() else path.parent
    files = tokenizer_files(path)
    if not files:
        raise DataPrepError(f"{path}: no tokenizer.json, tokenizer.model or vocab.json + merges.txt "
                            "(pass a model directory or the file)")
    first = files[0]
    try:
        if first.name == "tokenizer.model":
            import sentencepiece
            backend = _SentencePieceBackend(sentencepiece.SentencePieceProcessor(model_file=str(first)))
        elif first.name == "vocab.json":
            backend = _HfBackend(_byte_level_bpe(files[0], files[1], _read_json(model_dir / "tokenizer_config.json")))
        else:
            from tokenizers import Tokenizer as HFTokenizer
            backend = _HfBackend(HFTokenizer.from_file(str(first)))
    except DataPrepError:
        raise
    except Exception as e:  # tokenizers and sentencepiece raise plain Exception subclasses
        names = " + ".join(f.name for f in files)
        msg = " ".join(str(e).split())  # one line
        raise DataPrepError(f"{model_dir}: cannot load tokenizer ({names}): {msg}") from None
    return Tokenizer(backend, first, model_dir, tokenizer_fingerprint(files), files)


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
    post = tokenizer.backend.post_processor()
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
