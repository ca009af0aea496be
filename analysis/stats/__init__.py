"""The statistics of the report, apart from its presentation: the one emergence rule (emergence.py), the emergence
atlas (atlas.py), the Bigram-Backcopy study's agreement rules (bbm.py), the toy-to-text bridge (bridge.py) and the
atlas runner's convergence rule (convergence.py). They read runs through analysis.results and the tables of
cells/; analysis/sections/ renders what they compute, and no module here imports a section, the page, its tables
or its figures (tests/python/test_import_graph.py)."""
