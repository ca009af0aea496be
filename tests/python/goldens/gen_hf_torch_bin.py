"""PyTorch-checkpoint fixtures (pytorch_model*.bin: the layout the hub serves for facebook/opt-* and the
original GPT-2 repositories) with goldens from transformers itself, for src/io/torch_file.* and the
survey's weight loading (hf::Checkpoint).

transformers 5 writes safetensors only, so the weights are written as transformers 4's
save_pretrained(safe_serialization=False) wrote them: torch.save of the model's state_dict (tied
weights are one Parameter under two names: one storage, two views), sharded by
huggingface_hub.split_torch_state_dict_into_shards into pytorch_model-0000i-of-0000n.bin with
pytorch_model.bin.index.json. golden.safetensors is what transformers computes after loading the
directory back (gen_hf_families.write_golden: eager attention, float64; no missing or unexpected keys),
so the C++ family tests and tests/python/test_survey.py compare against it as for every other fixture.

    tests/fixtures/hf/opt_bin_tied     OPT, tied head, one pytorch_model.bin, vocab.json + merges.txt (a
                                       byte-level BPE with OPT's special tokens), no tokenizer.json
    tests/fixtures/hf/opt_bin_sharded  OPT, tied head, 3 KB shards + index, names without "model."
                                       (the hub's OPT checkpoints spell them "decoder.*")
    tests/fixtures/hf/gpt2_bin         GPT-2 from one .bin in which one Conv1D weight is stored as a
                                       transposed (non-contiguous) view and the token table as a view at
                                       an offset into a larger storage: what torch.save keeps of views
    tests/fixtures/tokenizers/         transformers' own token ids (its special tokens included) for a few
                                       texts from opt_bin_tied's vocab.json + merges.txt (GPT2Tokenizer)
                                       and from llama_sp/tokenizer.model (LlamaTokenizer; the sentencepiece
                                       fixture of data_prep.fixtures): golden_ids.json, for
                                       tests/python/test_data_prep_survey.py
    tests/fixtures/torch/tensors.pt    the unit fixture of tests/cpp/test_torch_file.cpp: an OrderedDict
                                       with _metadata of f32/f16/bf16/f64/i32 tensors, a Parameter, a
                                       0-d tensor, a strided view, an offset view, two views of one
                                       storage, an int64 buffer; tensors_expected.safetensors holds each
                                       readable one contiguous (numpy, not the C++ reader)

Usage: .venv-oracle/bin/python gen_hf_torch_bin.py [GOLDEN_DIR]   (fixtures go to GOLDEN_DIR/../fixtures;
default: the repository's tests/fixtures)
"""
import collections
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from huggingface_hub import split_torch_state_dict_into_shards
from transformers import GPT2Config, GPT2LMHeadModel, OPTConfig, OPTForCausalLM

from gen_hf_families import random_model, write_golden
from golden_io import save_golden

# A little English for the BPE merges; the byte-level alphabet (256) and OPT's four specials come first.
TEXT = ["the sink takes the attention of every head", "a first token collects what the others do not need",
        "attention sinks appear in large language models", "the model attends to the first token"] * 4
OPT_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0..3 as in facebook/opt-*: BOS is </s> (2)


def bpe_files(out, vocab_size):
    """vocab.json + merges.txt of a byte-level BPE (GPT-2's pre-tokenizer) with OPT's special tokens."""
    from tokenizers import ByteLevelBPETokenizer
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(TEXT, vocab_size=vocab_size, min_frequency=1, special_tokens=OPT_SPECIALS,
                            show_progress=False)
    tok.save_model(str(out))
    vocab = json.loads((out / "vocab.json").read_text())
    assert [vocab[s] for s in OPT_SPECIALS] == [0, 1, 2, 3] and len(vocab) == vocab_size, len(vocab)
    (out / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "</s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "</s>"}, indent=2) + "\n")
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "GPT2Tokenizer", "add_bos_token": True, "add_prefix_space": False,
         "bos_token": "</s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "</s>"}, indent=2) + "\n")


def fixtures():
    """name -> (model class, config, options). options: shard (max_shard_size), strip (a prefix dropped
    from every name), views (rewrite tensors as views), bpe (tokenizer vocabulary size)."""
    return {
        "opt_bin_tied": (OPTForCausalLM,
                         OPTConfig(vocab_size=280, hidden_size=16, num_attention_heads=2, num_hidden_layers=2,
                                   ffn_dim=32, max_position_embeddings=16, word_embed_proj_dim=16,
                                   do_layer_norm_before=True, tie_word_embeddings=True),
                         {"bpe": 280}),
        "opt_bin_sharded": (OPTForCausalLM,
                            OPTConfig(vocab_size=64, hidden_size=16, num_attention_heads=4, num_hidden_layers=2,
                                      ffn_dim=24, max_position_embeddings=16, word_embed_proj_dim=16,
                                      do_layer_norm_before=True, tie_word_embeddings=True),
                            {"shard": "3KB", "strip": "model.", "interventions": [("replace", 4), ("swap", 9)]}),
        "gpt2_bin": (GPT2LMHeadModel, GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                                                 bos_token_id=63, eos_token_id=63),
                     {"views": True, "interventions": [("replace", 6), ("swap", 3)]}),
    }


def as_views(state):
    """The same values, stored as views torch.save keeps: h.0.attn.c_attn.weight as the transpose of a
    contiguous [out, in] tensor (strides (1, in)), wte.weight at an offset into a larger storage."""
    out = dict(state)
    w = state["transformer.h.0.attn.c_attn.weight"]
    out["transformer.h.0.attn.c_attn.weight"] = w.t().contiguous().t()
    assert not out["transformer.h.0.attn.c_attn.weight"].is_contiguous()
    wte = state["transformer.wte.weight"]
    big = torch.zeros(wte.numel() + 40)
    big[24:24 + wte.numel()] = wte.reshape(-1)
    out["transformer.wte.weight"] = big[24:24 + wte.numel()].view(wte.shape)
    assert out["transformer.wte.weight"].storage_offset() == 24
    if "lm_head.weight" in state:  # tied: still one storage with the token table
        out["lm_head.weight"] = out["transformer.wte.weight"]
    return out


def save_bin(model, out, options):
    """pytorch_model.bin (or shards + index) as transformers 4 wrote them."""
    state = model.state_dict()
    if options.get("views"):
        state = as_views(state)
    if "strip" in options:
        p = options["strip"]
        state = {k[len(p):] if k.startswith(p) else k: v for k, v in state.items()}
    split = split_torch_state_dict_into_shards(state, filename_pattern="pytorch_model{suffix}.bin",
                                               max_shard_size=options.get("shard", "50GB"))
    for filename, names in split.filename_to_tensors.items():
        torch.save({n: state[n] for n in names}, out / filename)
    if split.is_sharded:
        index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        (out / "pytorch_model.bin.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def make_bin_fixture(name, cls, config, options, root):
    model, rng = random_model(name, cls, config, options)
    out = root / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    model.config.save_pretrained(out)
    save_bin(model, out, options)
    if "bpe" in options:
        bpe_files(out, options["bpe"])
    write_golden(out, rng, options, strict=True)


def make_tensor_fixture(root):
    out = root / "torch"
    out.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(18)
    base = torch.randn(6, 5, generator=g)
    shared = torch.randn(24, generator=g)
    sd = collections.OrderedDict()
    sd["f32"] = torch.randn(3, 4, generator=g)
    sd["f16"] = torch.randn(2, 3, generator=g).half()
    sd["bf16"] = torch.randn(5, generator=g).bfloat16()
    sd["f64"] = torch.randn(2, 2, 2, generator=g).double()
    sd["i32"] = torch.arange(-3, 4, dtype=torch.int32)
    sd["scalar"] = torch.tensor(2.5)
    sd["param"] = torch.nn.Parameter(torch.randn(4, 2, generator=g))
    sd["transposed"] = base.t()                    # [5, 6], strides (1, 5)
    sd["every_other_row"] = base[::2, 1:4]         # [3, 3], strides (10, 1), offset 1
    sd["shared_a"] = shared[:12].view(3, 4)        # two views of one storage
    sd["shared_b"] = shared[8:].view(2, 8)         # overlapping shared_a's last 4 elements
    sd["i64"] = torch.arange(3)                    # int64: listed, not readable
    sd._metadata = collections.OrderedDict({"": {"version": 1}})
    torch.save(sd, out / "tensors.pt")
    expected = {k: v.detach().float().numpy() if v.dtype in (torch.float16, torch.bfloat16) else v.detach().numpy()
                for k, v in sd.items() if k != "i64"}
    # f16/bf16 values as f32 (exact); the dtype the reader must report is in the metadata.
    save_golden(str(out / "tensors_expected.safetensors"), {f"t/{k}": np.ascontiguousarray(v) for k, v in expected.items()},
                {})
    print(f"torch: {sum(f.stat().st_size for f in out.iterdir()) / 1024:.0f} KiB")


# Texts over the fixture vocabularies. The sentencepiece fixture has no byte fallback, and transformers 5
# drops characters outside a sentencepiece vocabulary where sentencepiece emits <unk>, and treats a
# leading space differently: its texts stay within the fixture's characters, without leading spaces.
BPE_TEXTS = ["the sink takes the attention", "  two leading spaces and\ttabs\nnewlines", "digits 1234567 end ",
             "ünïcödé 数字", "a</s>b", ""]
SP_TEXTS = ["the sink attention token", "law code math paper court email", "first data domain  two spaces",
            "a b c", ""]


def make_tokenizer_goldens(root):
    from transformers import AutoTokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from data_prep.fixtures import make_model_dir

    out = root / "tokenizers"
    shutil.rmtree(out, ignore_errors=True)
    llama = make_model_dir(out / "llama_sp", "llama", "sentencepiece")
    tcfg = json.loads((llama / "tokenizer_config.json").read_text())  # as Llama-2-7b-hf names its class
    (llama / "tokenizer_config.json").write_text(json.dumps({**tcfg, "tokenizer_class": "LlamaTokenizer"}))
    golden = {}
    for name, d, texts in (("opt_bin_tied", root / "hf" / "opt_bin_tied", BPE_TEXTS), ("llama_sp", llama, SP_TEXTS)):
        tok = AutoTokenizer.from_pretrained(d)
        golden[name] = {"tokenizer_class": type(tok).__name__, "texts": texts,
                        "ids": [tok(t).input_ids for t in texts]}
    (out / "golden_ids.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")
    print(f"tokenizers: {sum(f.stat().st_size for f in out.rglob('*') if f.is_file()) / 1024:.0f} KiB")


def main():
    root = (Path(sys.argv[1]).resolve().parent if len(sys.argv) > 1
            else Path(__file__).resolve().parents[2]) / "fixtures"
    torch.use_deterministic_algorithms(True)
    for name, (cls, config, options) in fixtures().items():
        make_bin_fixture(name, cls, config, options, root / "hf")
    make_tensor_fixture(root)
    make_tokenizer_goldens(root)


if __name__ == "__main__":
    main()
