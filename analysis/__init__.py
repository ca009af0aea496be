"""sinklab analysis: HDF5 results -> tables (and, later, the paper's figures)."""
