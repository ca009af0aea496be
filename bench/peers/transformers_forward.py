"""transformers eager peer of bench/hf_forward.cpp, and the maker of the shared benchmark inputs.

    python transformers_forward.py make SHAPE DIR     random Pythia-shaped GPTNeoXForCausalLM (seed 0) saved
                                                      with save_pretrained (f32 safetensors) into DIR, and
                                                      DIR/ids.safetensors: 100 x 64 random token ids (seed 1)
    python transformers_forward.py run DIR [--batch 100] [--repeat 3] [--threads N] [--mode probe|logits]

run: attn_implementation="eager", float32, torch.inference_mode, output_attentions=True, over the same
ids in batches; mode probe runs the base model (no LM head: the survey's work), logits the CausalLM.
Prints one line in hf_forward's format: sequences/s of the best pass (wall clock, and CPU time of all
threads) and the peak RSS (ru_maxrss, which includes the Python interpreter and torch itself).
"""
import argparse
import resource
import time

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from transformers import AutoModelForCausalLM, GPTNeoXConfig, GPTNeoXForCausalLM

SHAPES = {  # Pythia's configs (EleutherAI/pythia-14m, -160m), random weights
    "pythia-14m": dict(hidden_size=128, num_hidden_layers=6, num_attention_heads=4, intermediate_size=512),
    "pythia-160m": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
}


def make(shape, out):
    torch.manual_seed(0)
    cfg = GPTNeoXConfig(vocab_size=50304, rotary_pct=0.25, rotary_emb_base=10000, max_position_embeddings=2048,
                        use_parallel_residual=True, tie_word_embeddings=False, **SHAPES[shape])
    GPTNeoXForCausalLM(cfg).save_pretrained(out, safe_serialization=True)
    ids = np.random.default_rng(1).integers(0, cfg.vocab_size, size=(100, 64)).astype(np.int32)
    save_file({"ids": ids}, f"{out}/ids.safetensors")


def run(args):
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.dir, attn_implementation="eager", dtype=torch.float32).eval()
    net = model.base_model if args.mode == "probe" else model
    ids = torch.from_numpy(load_file(f"{args.dir}/ids.safetensors")["ids"]).long()
    n, seq = ids.shape

    def one_pass(limit):
        for s0 in range(0, limit, args.batch):
            out = net(input_ids=ids[s0:s0 + args.batch], output_attentions=True)
            assert len(out.attentions) == model.config.num_hidden_layers

    with torch.inference_mode():
        one_pass(min(args.batch, n))  # warm-up
        best = best_cpu = 1e30
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            one_pass(n)
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"transformers mode={args.mode} seqs={n} T={seq} batch={args.batch} seqs_per_s={n / best:.2f} "
          f"seqs_per_cpu_s={n / best_cpu:.2f} peak_mib={peak_mib:.1f} threads={torch.get_num_threads()}")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("shape", choices=sorted(SHAPES))
    m.add_argument("dir")
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--batch", type=int, default=100)
    r.add_argument("--repeat", type=int, default=3)
    r.add_argument("--threads", type=int, default=0)
    r.add_argument("--mode", choices=["probe", "logits"], default="probe")
    args = p.parse_args()
    if args.cmd == "make":
        make(args.shape, args.dir)
    else:
        run(args)


if __name__ == "__main__":
    main()
