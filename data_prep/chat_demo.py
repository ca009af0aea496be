"""Generated chat data for the demo's fine-tuning (jobs/sft/tiny_cpu_*.ini): conversations of one to
three of the mini corpus's arithmetic questions (mini_corpus.math_document) and their answers, in the
UltraChat-200k jsonl layout that ``data_prep sft`` reads::

    {"messages": [{"role": "system", "content": ...}?, {"role": "user", "content": "What is 3 + 4?"},
                  {"role": "assistant", "content": "The answer is 7."}, ...]}

Deterministic: the same (n, seed) gives the same bytes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from .mini_corpus import _atomic_write, math_document

SYSTEM = "You are a careful assistant who answers arithmetic questions."


def chat_records(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for _ in range(n):
        lines = math_document(rng, n_problems=rng.randint(1, 3)).strip().split("\n")
        messages = [{"role": "system", "content": SYSTEM}] if rng.random() < 0.3 else []
        for question, answer in zip(lines[0::2], lines[1::2]):
            messages.append({"role": "user", "content": question})
            messages.append({"role": "assistant", "content": f"The answer is {answer}."})
        records.append({"messages": messages})
    return records


def write_chat_demo(path, n: int = 2000, seed: int = 0) -> int:
    """Writes n conversations to `path` (jsonl, atomically); returns n."""
    text = "".join(json.dumps(r) + "\n" for r in chat_records(n, seed))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(Path(path), text)
    return n
