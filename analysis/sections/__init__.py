"""The sections of the report's page, one module each. A section module has

    def write_section(rep, data):

which adds the section's headings, paragraphs, tables and figures to `rep` (analysis.report.Report:
heading, para, table, figure, skipped, notes) from `data` (a ReportData), and lists what it leaves out
and why with rep.skipped. analysis.report.SECTIONS calls them in page order; summary.py closes the page.
Helpers that several sections share are in labels.py; model_figures.py draws one probed model's figures.

Adding a section:
  1. analysis/sections/<name>.py: a docstring saying what the section shows, and write_section(rep, data)
     (rep.heading(2, title, anchor=...), rep.table(Table(...)), rep.figure(name, caption, figures.<kind>,
     ...), rep.skipped(what, why) for what the files do not hold);
  2. analysis/report.py: the module in the import from analysis.sections and in SECTIONS, where it goes on
     the page, and a line in the module docstring's list of sections;
  3. where needed: a drawing function in analysis/figures.py for a new kind of figure (arrays and a
     caption in, one PNG out), the reading of a new dataset in analysis/results.py (and ReportData, when
     the section needs something not yet pooled there);
  4. a test in tests/python (test_report.py writes small results files in the writers' schema).
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
