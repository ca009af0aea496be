"""The emergence atlas (issue #42): its cells (cells.py), base job files and runner (run.py)."""
