"""sinklab analysis: HDF5 results -> plain-text summary (summary), runs side by side (compare), and the
report's tables, figures and HTML page (report, built from sections/)."""
