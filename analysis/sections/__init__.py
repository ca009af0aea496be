"""The sections of the report's page, one module each. A section module has

    def write_section(rep, data):

which adds the section's heading, paragraphs, tables and figures to `rep` (analysis.report.Report:
section, heading, para, table, figure, finding, skipped, notes) from `data` (a ReportData), and lists what it
leaves out and why with rep.skipped. analysis.report.SECTIONS calls them in page order; closing.py closes the
page. Helpers that several sections share are in labels.py; model_figures.py draws one probed model's figures.
Sections only render: the statistics they show (emergence steps, intervals, verdicts, agreement rules) are
computed in analysis/stats/, which never imports a section (tests/python/test_import_graph.py).

Adding a section:
  1. analysis/sections/<name>.py: a docstring saying what the section shows, and write_section(rep, data):
     rep.section(title, anchor=...) (numbered in page order; call it only when there is something to show),
     rep.table(Table(...)) and rep.figure(name, short title, caption, figures.<kind>, ...) (the title is
     drawn in the PNG, the caption with the detail goes under it; both return the anchor to link to),
     rep.finding(sentence, anchor) for each result a reader should see first (the block at the top of the
     page, under the section's title: numbers formatted from the files, with what they mean), and
     rep.skipped(what, why) for what the files do not hold (one line per `why` at the end of the page);
  2. analysis/report.py: the module in the import from analysis.sections and in SECTIONS, where it goes on
     the page, and a line in the module docstring's list of sections;
  3. where needed: a drawing function in analysis/figures.py for a new kind of figure (arrays and a short
     title in, one PNG out; its legend outside the axes), the reading of a new dataset in
     analysis/results.py (and ReportData, when the section needs something not yet pooled there);
  4. a test in tests/python (test_report.py writes small results files in the writers' schema;
     test_report_bbm.py trains real ones).
No text needs to avoid machine paths by hand: Report shows every string through tables.public_text.
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
