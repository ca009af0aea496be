"""Shared pytest set-up for tests/python: make the repository root importable.

`python -m pytest` from the root already has it on sys.path; this makes plain `pytest` work too.
"""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
