"""The emergence atlas (issue #42): its base job files and runner (run.py); its cells are cells/atlas.py."""
