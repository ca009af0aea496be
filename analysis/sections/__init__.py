"""The sections of the report's page, one module each. A section module has

    def write_section(rep, data):

which adds the section's headings, paragraphs, tables and figures to `rep` (analysis.report.Report:
heading, para, table, figure, skipped, notes) from `data` (a ReportData), and lists what it leaves out
and why with rep.skipped. analysis.report.SECTIONS calls them in page order; summary.py closes the page.
Helpers that several sections share are in labels.py; model_figures.py draws one probed model's figures.
"""
from dataclasses import dataclass


@dataclass
class ReportData:
    """What the sections draw from: the results files read and their contents pooled over the files (in
    the order of the files), the threshold of the main tables and the job-file index."""
    files: list            # analysis.results.ResultsFile
    runs: list             # Run: /runs/<run> (sinklab-pretrain, sinklab-sft)
    entries: list          # ProbeEntry: /models/<model>/<input>/<domain> (sinklab-probe, sinklab-survey)
    items: list            # Item: /items/<id> (sinklab-survey's bookkeeping)
    scores: list           # ChoiceScore: multiple-choice accuracy (the survey's hellaswag input)
    ablation_losses: list  # AblationLoss: the survey's --ablations
    eps: float             # the threshold of Sink_1^eps in the main tables (--eps)
    job_index: object      # analysis.job_index.JobIndex: the paper's cells and their job files
