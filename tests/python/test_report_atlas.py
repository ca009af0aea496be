"""The report's "Emergence atlas" section (analysis/sections/atlas.py) on constructed atlas runs: results files
in sinklab-pretrain's schema (--bbm-meta runs named atlas.<scale>.<cell>.s<seed>) laid out as the atlas's
runner writes them (<atlas>/<scale>/<cell>/seed<k>/results.h5 beside atlas_status.json), against constructed
cells (the fields of cells/atlas.py's Cell), given to the report as one directory.

- the section comes first, its table holds the runs' numbers and every verdict kind, by each measure (Guo's BOS
  attention, the paper's Sink_1);
- the findings answer the KV-bias, no-BOS and sigmoid questions from the runs;
- the atlas's runs stay out of the Bigram-Backcopy section;
- a directory without results.h5 is one line and exit status 1;
- the page in headless Chromium: no console errors, every image loads;
- the forest plot draws a censored median as a hollow arrow marker and a censored interval end as an arrow.
- a cell at two scales: the atlas_scales table (Fisher's p, both scales together) and its findings.
"""
import csv
import json
import os

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
pytest.importorskip("matplotlib")

from analysis import report  # noqa: E402
from analysis.sections import atlas as section  # noqa: E402
from chromium import Browser, find_chromium  # noqa: E402

EPS = [0.2, 0.3, 0.4]
STEPS = np.arange(0, 210, 10)  # 21 evaluations, 0..200


class Spec:
    """A cell of the atlas's table (cells/atlas.py's Cell fields)."""

    def __init__(self, name, expect, source, settings):
        self.name, self.label, self.expect, self.source, self.settings, self.principal = \
            name, f"the {name} cell", expect, source, settings, True


SPECS = {
    "softmax": Spec("softmax", "sink", "Guo et al. 2024", {}),
    "sigmoid": Spec("sigmoid", "no_sink", "paper Table 6", {"attn-sim": "sigmoid", "attn-norm": "one"}),
    "kv_bias": Spec("kv_bias", "moved_to_bias", "paper Table 4", {"attn-bias": "kv"}),
    "kv_bias_no_bos": Spec("kv_bias_no_bos", "moved_to_bias", "paper Table 4", {"attn-bias": "kv",
                                                                                "document-rows": "false"}),
    "no_bos": Spec("no_bos", "none", "none stated", {"document-rows": "false"}),
}
# (cell, config, onsets: each seed's emergence step or None, proxy, Sink_* %, how it stopped)
# (a run's config attribute lists every setting; these the section reads, with sinklab-pretrain's defaults)
BOS_ROWS = "document-rows = true\nattn-bias = none\n"
CELLS = (("softmax", BOS_ROWS, [40, 120, 80, 60, 100], False, None, "converged"),
         ("sigmoid", BOS_ROWS + "attn-sim = sigmoid\nattn-norm = one\n", [150, 90, 110, 130, 170], True, None,
          "converged"),
         ("kv_bias", "document-rows = true\nattn-bias = kv\n", [None] * 5, False, 100.0, "converged"),
         ("kv_bias_no_bos", "attn-bias = kv\ndocument-rows = false\n", [None] * 5, False, 90.0, "cap"),
         ("no_bos", "document-rows = false\nattn-bias = none\n", [50, None, 70], False, None, "cap"),
         ("unlisted", BOS_ROWS, [40, 40, None], False, None, "converged"))


def _bos_curve(onset, k):
    """A BOS attention over STEPS whose persistent onset at 0.3 is `onset` (None: below 0.3 at the end), with
    a transient crossing before it."""
    bos = np.full(len(STEPS), 0.05 + 0.01 * k)
    bos[2] = 0.35  # step 20: crosses and falls back, no emergence
    if onset is not None:
        bos[STEPS >= onset] = 0.6 + 0.02 * k
    return bos


def write_atlas_run(root, scale, cell, seed, config, onset, proxy, star, stopped):
    """One atlas run's results file and atlas_status.json; returns the run directory."""
    d = root / scale / cell / f"seed{seed}"
    d.mkdir(parents=True)
    n = len(STEPS)
    bos = _bos_curve(onset, seed)
    fa = np.zeros((n, 1, 2, 2))
    fa[:, 0, 1, 0] = bos  # head 1 is the best one
    fa[:, 0, 0, 0] = 0.02
    raw = fa * (0.1 if proxy else 1.0)
    with h5py.File(d / "results.h5", "w") as f:
        f.attrs["command_line"] = "sinklab-pretrain --config jobs/atlas/x.ini"
        g = f.create_group(f"runs/atlas.{scale}.{cell}.s{seed}")
        g.attrs["config"] = config + f"seed = {seed}\n"
        ev = g.create_group("eval")
        ev.attrs["sink_eps"] = "0.2,0.3,0.4"
        ev.attrs["bbm_meta"] = "data/bbm/bbm.json"
        ev.attrs["query_groups"] = "non_trigger,trigger"
        if proxy:
            ev.attrs["proxy_scores"] = np.int64(1)
        alpha = fa[..., 0]  # alpha_1 of every query: the paper's measure follows Guo's here
        data = {"step": STEPS.astype(np.int64), "valid_loss": np.linspace(3, 1, n), "sink": np.zeros((n, 3)),
                "alpha": alpha,
                "first_attention": fa, "first_weight_raw": raw, "rest_weight_raw": np.full((n, 1, 2, 2), 0.001),
                "copy_loss": np.linspace(3, 0.04 + 0.01 * seed, n), "bigram_loss": np.linspace(3, 2, n),
                "vnorm_first": np.full((n, 1), 0.25), "vnorm_rest": np.ones((n, 1)),
                "hnorm_first": np.full((n, 1), 20.0), "hnorm_rest": np.full((n, 1), 2.0)}
        if star is not None:
            data["sink_star"] = np.full((n, 3), star)
            data["alpha_star"] = np.full((n, 1, 2), star / 100)
        for k, v in data.items():
            ev.create_dataset(k, data=v)
    (d / "atlas_status.json").write_text(json.dumps({"stopped": stopped, "steps": int(STEPS[-1]),
                                                     "rule": "copy loss within 0.05 of its floor"}))
    return d


@pytest.fixture(scope="module")
def atlas_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("atlas")
    for cell, config, onsets, proxy, star, stopped in CELLS:
        for seed, onset in enumerate(onsets):
            write_atlas_run(root / "atlas", "small", cell, seed, config, onset, proxy, star, stopped)
    out = root / "report"
    mp = pytest.MonkeyPatch()
    mp.setattr(section, "known_cells", lambda: SPECS)
    try:
        assert report.main([str(root / "atlas"), "-o", str(out)]) == 0
    finally:
        mp.undo()
    return root, out


def _csv(path, key="cell"):
    with open(path, newline="") as fh:
        return {r[key]: r for r in csv.DictReader(fh)}


def test_table_holds_the_runs_numbers_and_every_verdict(atlas_report):
    _, out = atlas_report
    rows = _csv(out / "tables" / "atlas.csv")
    assert list(rows) == [s.label for s in SPECS.values()] + ["unlisted"]  # the table's order, unknown last
    softmax = rows["the softmax cell"]
    assert softmax["Guo: sink fraction [95 % Wilson]"] == softmax["paper: sink fraction [95 % Wilson]"] == \
        "5/5 = 1.00 [0.57, 1.00]"
    assert softmax["Guo: median emergence step [95 % bootstrap]"].startswith("80 [")  # 40, 60, 80, 100, 120
    assert softmax["paper: converged Sink_1 (%) [95 % bootstrap]"].startswith("50.0 [")  # 1 of 2 heads
    assert softmax["expectation (source)"] == "a sink (Guo et al. 2024)"
    assert softmax["runs stopped"] == "5 converged"
    verdicts = {"the softmax cell": "agrees", "the sigmoid cell": "disagrees", "the kv_bias cell": "agrees",
                "the kv_bias_no_bos cell": "agrees", "the no_bos cell": "no expectation", "unlisted": "no expectation"}
    for measure in ("Guo", "paper"):
        assert {cell: r[f"{measure}: verdict"] for cell, r in rows.items()} == verdicts
    assert rows["the kv_bias cell"]["where the sink went (paper: seeds)"] == "moved 5, kept 0, split 0, none 0"
    no_bos = rows["the no_bos cell"]
    assert no_bos["Guo: median emergence step [95 % bootstrap]"].startswith("70 [")  # 50, 70, censored
    assert no_bos["runs stopped"] == "3 at the cap"
    cells = _csv(out / "tables" / "atlas_cells.csv")
    assert float(cells["kv_bias"]["Sink_*^0.3 (%)"]) == 100.0 and cells["kv_bias"]["guo: moved"] == "5"
    assert cells["kv_bias"]["paper: moved"] == "5" and cells["kv_bias"]["guo: median emergence step"] == "inf"
    assert float(cells["kv_bias"]["guo: censored runs' earliest last step"]) == 200
    runs = _csv(out / "tables" / "atlas_runs.csv", "run")
    assert len(runs) == sum(len(c[2]) for c in CELLS)
    for cell, _, onsets, *_ in CELLS:
        for seed, onset in enumerate(onsets):
            r = runs[f"atlas.small.{cell}.s{seed}"]
            assert r["Guo: emergence step"] == ("" if onset is None else str(onset)), r
            assert r["paper: emergence step"] == r["Guo: emergence step"], r
            assert r["best head"] == "1" and float(r["||v_BOS|| / mean ||v_other||"]) == 0.25


def test_section_first_and_findings_answer_the_questions(atlas_report):
    _, out = atlas_report
    page = (out / "index.html").read_text()
    assert page.index('id="findings"') < page.index('id="atlas"')
    assert '<h2 id="atlas">1. Emergence atlas</h2>' in page
    assert ("the rule can decide (agree or disagree) with 3 seeds, never (the interval of 3/3 still holds 0.5); "
            "with 5 seeds, when at least 5 of them point the same way") in page
    assert 'id="bbm"' not in page  # the atlas's runs are not the Bigram-Backcopy study's
    findings = (out / "findings.md").read_text()
    for measure in ("Guo's BOS attention", "the paper's Sink_1"):
        assert (f"The emergence atlas by {measure}: 6 cell(s), 26 runs; against its expectation each cell 3 agrees "
                "(small / the softmax cell, small / the kv_bias cell, small / the kv_bias_no_bos cell); 1 disagrees "
                "(small / the sigmoid cell *); 2 no expectation") in findings
    assert ("KV biases (small / the kv_bias cell): does the sink move to k*/v*? yes: by the paper's measure (both "
            "positions, every query) moved 5, kept 0, split 0, none 0 of 5 seeds") in findings
    assert "KV biases without BOS (small / the kv_bias_no_bos cell): does the sink move to k*/v*? yes" in findings
    assert "5 at the cap" in findings
    assert "No BOS (small / the no_bos cell): by Guo's measure the first position (any character) may or may not " \
           "hold a sink (undecided at 95 %)" in findings
    sigmoid = next(line for line in findings.splitlines() if line.startswith("- Sigmoid question"))
    assert "in absolute weights BOS gets 0.0" in sigmoid and "a large share of a small total" in sigmoid
    assert "disagrees" in sigmoid
    assert "- small / the sigmoid cell *: expected no sink (paper Table 6); by Guo's BOS attention 5/5 = 1.00 [0.57, " \
           "1.00] seeds with a sink, median emergence step 130 [90, 170]" in findings  # a disagreeing cell's line


def test_a_directory_without_results_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert report.main([str(tmp_path / "empty"), "-o", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a directory without any results.h5 under it" in err[0]


def test_atlas_section_in_headless_chromium(atlas_report):
    _, out = atlas_report
    assert_page_renders(out)


def assert_page_renders(out):
    """The report page in headless Chromium: no console errors, every image loads, the atlas first, no
    sideways scrolling."""
    if find_chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("no chromium on PATH: env/setup.sh installs Debian's chromium (env/apt-packages.txt)")
        pytest.skip("no chromium on PATH (env/setup.sh installs it)")
    with Browser() as browser:
        page = browser.open((out / "index.html").as_uri(), width=1400, height=900)
        state = page.evaluate("""(() => ({
            images: Array.from(document.images).map(i => i.src.split('/').pop()),
            broken: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
            first: document.querySelectorAll('h2')[1].id,
            scrollWidth: document.documentElement.scrollWidth,
            clientWidth: document.documentElement.clientWidth,
        }))()""")
        errors = page.errors
    assert errors == [], errors
    assert state["first"] == "atlas" and not state["broken"]
    assert sorted(state["images"]) == sorted(p.name for p in (out / "figures").glob("*.png"))
    assert "atlas_forest.png" in state["images"]
    assert state["scrollWidth"] <= state["clientWidth"]


def test_forest_draws_censored_medians_and_interval_ends_as_arrows(monkeypatch):
    from analysis import figures
    figs = []
    monkeypatch.setattr(figures, "_save", lambda fig, path, title: figs.append(fig))
    inf = float("inf")
    rows = [dict(label="done", median=80.0, lo=40.0, hi=120.0, censor=None, seeds=[(40, False), (120, False)],
                 fraction=1.0, frac_lo=0.57, frac_hi=1.0, verdict="agrees"),
            dict(label="half", median=70.0, lo=50.0, hi=inf, censor=200, seeds=[(50, False), (200, True)],
                 fraction=0.5, frac_lo=0.2, frac_hi=0.8, verdict="inconclusive"),
            dict(label="none", median=inf, lo=inf, hi=inf, censor=200, seeds=[(200, True)], fraction=0.0,
                 frac_lo=0.0, frac_hi=0.43, verdict="disagrees")]
    figures.forest("unused.png", "t", rows)
    ax = figs[0].axes[0]
    arrows = [a for a in ax.texts if getattr(a, "arrow_patch", None) is not None]
    assert len(arrows) == 1 and arrows[0].xy[1] == -1  # row "half": its interval's high end is censored
    censored = [line for line in ax.lines if line.get_marker() == ">" and line.get_markersize() == 8]
    assert [tuple(line.get_xydata()[0]) for line in censored] == [(200.0, -2.0)]  # row "none": its median
    assert [t.get_text() for t in ax.get_yticklabels()] == ["done", "half", "none"]


def test_cells_at_two_scales_get_their_comparison(tmp_path, monkeypatch):
    """softmax at two scales that differ (5/5 small, 0/3 cheap: Fisher's p = 1/56), sigmoid at two that agree
    (5/5, 3/3): the table atlas_scales, the rule, and the findings that say which differ and what both
    together read."""
    root = tmp_path / "atlas"
    for scale, cell, config, onsets, proxy in (
            ("small", "softmax", BOS_ROWS, [40, 120, 80, 60, 100], False),
            ("cheap", "softmax", BOS_ROWS, [None] * 3, False),
            ("small", "sigmoid", BOS_ROWS + "attn-sim = sigmoid\nattn-norm = one\n", [150, 90, 110, 130, 170], True),
            ("cheap", "sigmoid", BOS_ROWS + "attn-sim = sigmoid\nattn-norm = one\n", [60, 70, 80], True)):
        for seed, onset in enumerate(onsets):
            write_atlas_run(root, scale, cell, seed, config, onset, proxy, None, "converged")
    monkeypatch.setattr(section, "known_cells", lambda: SPECS)
    out = tmp_path / "report"
    assert report.main([str(root), "-o", str(out)]) == 0
    rows = _csv(out / "tables" / "atlas_scales.csv")
    softmax, sigmoid = rows["the softmax cell"], rows["the sigmoid cell"]
    assert softmax["scales (more seeds / fewer)"] == "small / cheap" and softmax["the scales"] == "differ"
    assert float(softmax["Fisher's exact p (two-sided)"]) == pytest.approx(1 / 56)
    assert softmax["fraction (fewer seeds)"] == "0/3 = 0.00 [0.00, 0.56]"
    assert sigmoid["the scales"] == "consistent" and float(sigmoid["Fisher's exact p (two-sided)"]) == 1.0
    assert sigmoid["both together [95 % Wilson]"] == "8/8 = 1.00 [0.68, 1.00]"
    assert sigmoid["verdicts (more / fewer)"] == "disagrees / inconclusive"
    assert sigmoid["verdict of both together"] == "disagrees"
    page = (out / "index.html").read_text()
    assert "across scales, a cell run at two scales" in page
    findings = (out / "findings.md").read_text()
    assert ("Across scales (small with 5 seeds against cheap with 3), by Fisher's exact test on the counts each "
            "verdict reads: 1 of 2 cells differ at p < 0.05 (the softmax cell); 1 of 2 are consistent (the "
            "sigmoid cell)") in findings
    assert ("the softmax cell: small 5/5 = 1.00 [0.57, 1.00] seeds with a sink, cheap 0/3 = 0.00 [0.00, "
            "0.56]") in findings
    assert ("Both scales' seeds together, for the consistent cells (one population assumed, not proven): the "
            "sigmoid cell 8/8 = 1.00 [0.68, 1.00], disagrees; no verdict changes") in findings
    assert 'id="tab-atlas_scales"' in page
    assert_page_renders(out)
