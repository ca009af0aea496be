"""The job files (.ini), their writer (pretrain/make_jobs.py) and the runners (python -m jobs.atlas.run, python -m
jobs.bridge.run). The tables of cells they run are the top-level package cells/; the runners read results and judge
convergence through analysis.results and analysis.stats, and analysis/ never imports jobs/
(tests/python/test_import_graph.py)."""
