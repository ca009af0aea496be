"""atheris target: data_prep's GGUF importer (data_prep.gguf_import.import_gguf: the gguf package's
reader behind GGUFFile's checks, the Llama config, the tokenizer, dequantisation of every tensor type,
the safetensors writer). Malformed input must end in one DataPrepError line naming the file; any other
exception, a crash or a hang is a finding. Run by tests/fuzz/run.sh with libFuzzer's flags:

    .venv/bin/python tests/fuzz/fuzz_gguf.py -max_total_time=60 tests/fuzz/corpus/fuzz_gguf
"""
import os
import sys
import tempfile
import warnings
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
with atheris.instrument_imports(include=["data_prep", "gguf"]):
    from data_prep import DataPrepError
    from data_prep.gguf_import import import_gguf

# Under $SINKLAB_FUZZ_SCRATCH (tests/fuzz/run.sh creates and removes it per run), else /dev/shm.
scratch = Path(tempfile.mkdtemp(prefix=f"sinklab-fuzz-{os.getpid()}-",
                                dir=os.environ.get("SINKLAB_FUZZ_SCRATCH") or ("/dev/shm" if os.path.isdir("/dev/shm") else None)))
gguf_path = scratch / "model.gguf"
out_dir = scratch / "model"


def test_one_input(data: bytes) -> None:
    gguf_path.write_bytes(data)
    try:
        import_gguf(gguf_path, out_dir)
    except DataPrepError:
        pass


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # numpy overflow warnings from fuzzed scales are not findings
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
