"""The first token's hidden-state norm per layer of the real models: sinklab-survey's hnorm_first against
transformers' own GGUF loader (eager, float32) on the same tokens (each layer's output; the last layer's before
the final norm, as the survey takes it). Prints, per model and input, the largest relative difference, the
survey's norms (pooled over domains, sequence-weighted) at six layers and in full.

    .venv-oracle/bin/python bench/check_real_models_hnorm.py SURVEY.h5 data/models
"""
import os
import sys

os.environ.setdefault("TQDM_DISABLE", "1")
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

torch.set_num_threads(2)
survey, root = sys.argv[1], sys.argv[2]
ggufs = {"smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
         "qwen2.5-coder-0.5b": "Qwen2.5-Coder-0.5B-Instruct-AWQ.Q4_K_M.gguf"}
h = h5py.File(survey)
for name, g in ggufs.items():
    model = AutoModelForCausalLM.from_pretrained(root, gguf_file=g, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    last = {}
    model.model.layers[-1].register_forward_hook(
        lambda m, i, o: last.__setitem__("h", o[0] if isinstance(o, tuple) else o))
    for inp in ("natural", "random", "repeat"):
        grp = h[f"models/{name}/{inp}"]
        s_all, r_all, n = 0, 0, 0
        for dom in grp:
            it = grp[dom]
            toks = torch.tensor(it["tokens"][()], dtype=torch.long)
            with torch.no_grad():
                out = model(toks, output_hidden_states=True)
            hs = [out.hidden_states[l + 1][:, 0] for l in range(len(out.hidden_states) - 2)] + [last["h"][:, 0]]
            ref = torch.stack([x.double().norm(dim=-1).mean() for x in hs]).numpy()
            s_all = s_all + it["hnorm_first"][()] * len(toks)
            r_all = r_all + ref * len(toks)
            n += len(toks)
        s, r = s_all / n, r_all / n
        rel = np.abs(s - r) / np.abs(r)
        L = len(s)
        pick = sorted({0, 1, 2, L // 2, L - 2, L - 1})
        print(f"{name:<20}{inp:<8} L={L} max rel diff {rel.max():.2g}; layers {pick}: "
              + " ".join(f"{s[l]:.1f}" for l in pick) + f"; max {s.max():.1f} at layer {int(s.argmax())}", flush=True)
        print("   full:", " ".join(f"{x:.1f}" for x in s), flush=True)
