"""Small HDF5 helpers shared by survey_inputs.py and sft.py."""

from __future__ import annotations

import datetime
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from . import __version__


@contextmanager
def atomic_h5(path: str | Path):
    """Opens a temporary HDF5 file next to ``path`` and renames it into place on success.

    A crash or a Ctrl-C leaves the previous file (or nothing), never a half-written one.
    """
    import h5py

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["data_prep_version"] = __version__
            f.attrs["created_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            f.attrs["command_line"] = " ".join(sys.argv)
            yield f
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
