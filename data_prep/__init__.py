"""sinklab data preparation: Pile reader, tokenisation, token shards, survey inputs, SFT data, mini corpus.

Every command is reachable as ``python -m data_prep <command>``; see data_prep/README.md.
"""

__version__ = "0.1.0"


class DataPrepError(Exception):
    """An error the user can cause (bad file, bad flag). The CLI prints it as one line and exits 2.

    The message must name the offending file or flag so that the user knows what to fix.
    """
