"""The tables of what runs, as plain data: the paper's pre-training cells (pretrain.py), the emergence atlas's
cells (atlas.py) and the bridge's (bridge.py). jobs/ writes and runs them, analysis/ judges their runs against
them; this package imports neither (tests/python/test_import_graph.py holds it to that)."""
