"""The job files (.ini) and scripts of sinklab; a package only so that analysis can import
jobs.pretrain.make_jobs, the table of the paper's pre-training cells."""
