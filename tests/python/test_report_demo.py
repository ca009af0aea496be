"""The report as a researcher reads it (issue #30), on a demo-shaped set of real results files written by
sinklab's binaries at a tiny size (tests/python/report_inputs.py: Bigram-Backcopy softmax and sigmoid runs,
BOS-first pre-training runs, sinklab-probe of a checkpoint fed BOS first, a fine-tuning run, a survey of the
checkpoint and of an HF model at T = 8 and of the HF model again at T = 16 with window ablations):

- the page opens with the findings, and each finding's numbers are the files' (BBM runs, pre-training runs,
  models on each input, the ablations' loss changes, fine-tuning stability);
- every cell right: the first token as the probe fed it (not the probe's constant bos attribute), T in the
  label of a model measured at two T (no file-name suffix), sinklab's own checkpoints named by variant,
  size, run, step and tokens (no '?'), pre-training and fine-tuning on separate tables and axes, proxy
  scores explained once where they first appear;
- figures: short titles (detail in the caption), no machine path anywhere in the page, legends outside the
  axes and a reference line drawn once, lone points drawn as labelled points, sections numbered 1, 2, 3...,
  skipped parts one line per reason;
- checked in a real browser: headless Chromium (tests/python/chromium.py, the DevTools protocol on a pipe)
  loads the page without console errors, with no horizontal scroll at 1400 px, every <img> loaded, the
  findings block the first section; a screenshot of the first screen is saved with the test output
  ($SINKLAB_TEST_OUTPUT, else test-output/ at the repository root).

The binaries come from $SINKLAB_BIN_DIR; the tests skip only when they are absent. The browser test skips
when no chromium is installed, except under CI (CI set), where env/setup.sh installs it: there it fails.
"""
import csv
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
pytest.importorskip("matplotlib")

from analysis.stats.emergence import persistent_onset_step  # noqa: E402
import report_inputs  # noqa: E402
from chromium import Browser, find_chromium  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
EPS_I = 1  # eps = 0.3 in the files' thresholds 0.2, 0.3, 0.4
pytestmark = pytest.mark.skipif(bool(report_inputs.binaries_missing()),
                                reason=f"{report_inputs.binaries_missing()} not built in {report_inputs.BIN}")


@pytest.fixture(scope="module")
def demo(corpus, tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    files = report_inputs.demo_results(d, corpus)
    out = d / "report"
    proc = subprocess.run([sys.executable, "-m", "analysis.report", *map(str, files), "-o", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"dir": d, "files": files, "out": out, "page": (out / "index.html").read_text(),
            "findings": (out / "findings.md").read_text()}


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _text(page):
    """The page's visible text, tags removed."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page.split("</style>", 1)[-1]))


def _finding(findings, start):
    line = [x for x in findings.splitlines() if x.startswith("- " + start)]
    assert len(line) == 1, (start, findings)
    return line[0]


# --- findings first, numbers from the files ------------------------------------------------------------------

def test_findings_open_the_page_and_quote_the_files(demo):
    page, findings, d = demo["page"], demo["findings"], demo["dir"]
    h2 = re.findall(r"<h2[^>]*>([^<]*)</h2>", page)
    assert h2[0] == "Findings" and h2[1] == "1. Sink emergence (Bigram-Backcopy)"
    assert [g for g in re.findall(r"^\*\*(.*)\*\*$", findings, re.M)] == [
        "Sink emergence (Bigram-Backcopy)", "Training runs", "Probed and surveyed models",
        "What the sink does: ablations", "Fine-tuning stability (paper App. D, Fig. 30)"]
    # Every sentence of findings.md is on the page, in the findings block.
    block = _text(page.split('<section id="findings">')[1].split("</section>")[0])
    for line in findings.splitlines():
        if line.startswith("- "):
            assert " ".join(line[2:].split()) in " ".join(block.split()), line

    with h5py.File(d / "bbm_softmax" / "results.h5", "r") as f:  # BBM: BOS attention at the last evaluation
        ev = f["runs/bbm.softmax/eval"]
        bos = ev["first_attention"][..., 0].reshape(len(ev["step"]), -1).max(axis=1)
        line = _finding(findings, "bbm.softmax (softmax (the CPU setting))")
        onset = persistent_onset_step(ev["step"][...], bos, 0.3)
        if onset is not None:
            assert f"a sink emerged at step {onset}" in line
        else:
            assert f"no sink in {int(ev['step'][-1])} steps" in line
        assert f"{bos[-1]:.2f}" in line and "the paper expects a sink" in line

    for run in ("softmax_bos", "sigmoid_bos"):  # pre-training: Sink_1^0.3 on the inputs it was trained on
        with h5py.File(d / run / "results.h5", "r") as f:
            ev = f[f"runs/{run}/eval"]
            sink = ev["sink_k_intervened"][:, 0, EPS_I]
            line = _finding(findings, f"{run}: ")
            star = "*" if int(ev.attrs["proxy_scores"]) else ""
            assert f"{sink[-1]:.2f} %{star} at step {int(ev['step'][-1])}" in line
            assert "measured on inputs that start with token 63 as it was trained" in line and "1-2B tokens" in line

    with h5py.File(d / "probe.h5", "r") as f:  # models: Sink_1^0.3 on each input (mean over domains)
        line = _finding(findings, "tiny_softmax_bos: ")
        for inp, words in (("natural", "natural text"), ("random", "random tokens"), ("repeat", "a repeated token")):
            g = f[f"models/tiny_softmax_bos/{inp}"]
            v = np.mean([g[dom]["sink"][EPS_I] for dom in g])
            assert f"{v:.2f} % on {words}" in line, (inp, line)
    with h5py.File(d / "streaming.h5", "r") as f:  # ablations: the loss change, mean over domains
        m = f["models/tiny_llama"]
        full = np.mean([m["natural"][dom].attrs["loss"] for dom in m["natural"]])
        win = np.mean([m["natural+window_4"][dom].attrs["loss"] for dom in m["natural+window_4"]])
        line = _finding(findings, "tiny_llama (natural, T=16), next-token loss against full attention")
        assert f"a window of the 4 most recent tokens {win - full:+.3f} nats ({full:.3f} -> {win:.3f})" in line
        assert "the first 1 token + the 3 most recent" in line
    with h5py.File(d / "sft_softmax" / "results.h5", "r") as f:  # fine-tuning stability
        g = f["runs/sft_softmax"]
        line = _finding(findings, "sft_softmax (fine-tuning softmax_bos, step 30)")
        n_events = len(g["events/step"]) if "events" in g and "step" in g["events"] else 0
        nonfinite = int(g["monitor/nonfinite_steps"][-1])
        assert f"{len(g['train/loss'])} steps, {nonfinite} non-finite, {n_events} loss" in line
        ev = g["eval"]
        assert f"{ev['sink'][0, EPS_I]:.2f} % before, {ev['sink'][-1, EPS_I]:.2f} % after" in line


# --- every cell right ---------------------------------------------------------------------------------------

def test_first_token_is_what_the_probe_fed(demo):
    """sinklab-probe writes bos = 0 whatever it fed; the probe of the BOS-first checkpoint fed token 63 first
    (--fixed-token-position 1, attribute intervention fixed=1:63); the survey's inputs have no prefix."""
    with h5py.File(demo["dir"] / "probe.h5", "r") as f:
        g = f["models/tiny_softmax_bos/natural"]
        attrs = g[next(iter(g))].attrs
        assert int(attrs["bos"]) == 0 and str(attrs["intervention"]) == f"fixed=1:{report_inputs.BOS}"
    rows = {(r["model"], r["input"]): r for r in _csv(demo["out"] / "tables" / "inputs.csv")}
    for inp in ("natural", "random", "repeat"):
        assert rows[("tiny_softmax_bos", inp)]["first token"] == str(report_inputs.BOS)
        assert rows[("tiny_llama (T=8)", inp)]["first token"] == "none"
    per = _csv(demo["out"] / "tables" / "per_domain.csv")
    assert {r["first token"] for r in per if r["model"] == "tiny_softmax_bos"} == {str(report_inputs.BOS)}
    assert f"first token={report_inputs.BOS}" in demo["page"]  # the figures' captions


def test_T_in_the_label_of_a_model_measured_at_two_lengths(demo):
    rows = {r["model"]: r for r in _csv(demo["out"] / "tables" / "table1.csv")}
    assert {"tiny_llama (T=8)", "tiny_llama (T=16)"} <= set(rows)
    assert not any("[" in m for m in rows), rows  # no file-name suffix
    with h5py.File(demo["dir"] / "streaming.h5", "r") as f:
        g = f["models/tiny_llama/natural"]
        assert float(rows["tiny_llama (T=16)"]["natural"]) == pytest.approx(np.mean([g[x]["sink"][EPS_I] for x in g]))
    with h5py.File(demo["dir"] / "survey.h5", "r") as f:
        g = f["models/tiny_llama/natural"]
        assert float(rows["tiny_llama (T=8)"]["natural"]) == pytest.approx(np.mean([g[x]["sink"][EPS_I] for x in g]))
    assert "tiny_softmax_bos" in rows and "tiny_softmax_bos_hf" in rows  # measured at one T each: plain names


def test_sinklab_models_are_labelled_not_question_marks(demo):
    rows = [r for r in _csv(demo["out"] / "tables" / "inputs.csv") if r["model"].startswith("tiny_softmax_bos")]
    assert len(rows) == 6
    with h5py.File(demo["dir"] / "softmax_bos" / "results.h5", "r") as f:
        tokens = int(f["runs/softmax_bos/train/tokens"][29])  # after 30 steps
    for r in rows:
        assert "?" not in (r["model_type"], r["source"], r["quantization"]), r
        assert r["model_type"].startswith(f"sinklab: softmax, token {report_inputs.BOS} first, d=32, 2 layers, 2 heads")
        assert r["source"] == f"run softmax_bos, step 30 ({tokens:,} tokens)", r["source"]
        assert r["quantization"] == "none (float32 checkpoint)"


def test_pretraining_and_finetuning_apart(demo):
    out = demo["out"]
    assert {r["run"] for r in _csv(out / "tables" / "runs.csv")} == {"softmax_bos", "sigmoid_bos"}
    compare = _csv(out / "tables" / "runs_compare.csv")
    assert not any("sft" in c or "bbm" in c for c in compare[0])
    assert [int(r["step"]) for r in compare] == [0, 10, 20, 30]
    page = demo["page"]
    sft = page.split('id="sft"')[1]
    assert 'id="fig-sft_evals"' in sft and 'id="fig-fig30_sft_stability"' in sft
    assert page.index('id="runs"') < page.index('id="sft"')


def test_proxy_scores_explained_once_where_they_first_appear(demo):
    page = demo["page"]
    assert page.count('id="proxy-scores"') == 1
    body = page.split('<section id="findings">')[1].split("</section>", 1)[1]
    first_star = re.search(r"<td>[0-9.]+\*</td>", body).start()
    assert body.index('id="proxy-scores"') > first_star  # under the first table with a * cell
    assert body[first_star:body.index('id="proxy-scores"')].count("<table>") == 0
    assert 'href="#proxy-scores"' in page  # later tables and the summary link to it


# --- figures and the page -----------------------------------------------------------------------------------

def test_figures_titles_paths_numbering_and_skipped(demo):
    page, d = demo["page"], demo["dir"]
    for title in re.findall(r'<img src="figures/[^"]+" alt="([^"]*)"', page):
        assert len(html.unescape(title)) <= 80 and "/" not in title.replace("||", "").replace(" / ", ""), title
    for bad in ("/tmp/", "/root/", str(REPO_ROOT), str(d)):
        assert bad not in page, bad
    numbers = [int(n) for n in re.findall(r"<h2 id=\"[^\"]+\">(\d+)\. ", page)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 5
    skipped = page.split('id="skipped"')[1].split("</ul>")[0]
    reasons = re.findall(r'<li class="note">([^:<]*):', skipped)
    assert len(reasons) == len(set(reasons)), reasons  # one line per reason


def _captured(monkeypatch):
    from analysis import figures
    figs = []
    monkeypatch.setattr(figures, "_save", lambda fig, path, title: figs.append(fig))
    return figures, figs


def test_legends_outside_and_reference_lines_once(monkeypatch):
    figures, figs = _captured(monkeypatch)
    series = [(f"run {k}", np.arange(3), np.linspace(0.1, 0.2, 3) + k / 10, 0.0741) for k in range(5)]
    figures.alpha1_over_training(None, "t", series)
    fig = figs[-1]
    fig.canvas.draw()  # the constrained layout places the legend
    ax = fig.axes[0]
    assert ax.get_legend() is None and len(fig.legends) == 1  # one legend, the figure's, outside the axes
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert sum("uniform attention" in x for x in labels) == 1 and len(labels) == 6
    assert sum(1 for line in ax.lines if line.get_linestyle() == ":") == 1  # the baseline drawn once
    bbox = fig.legends[0].get_window_extent(fig.canvas.get_renderer())
    assert bbox.x0 >= ax.get_window_extent(fig.canvas.get_renderer()).x1  # right of the axes


def test_lone_points_are_labelled_points(monkeypatch):
    figures, figs = _captured(monkeypatch)
    figures.xy_panels(None, "t", [{"series": [("window only", [256], [3.4], "o-"), ("window + first 4 tokens", [252],
                                                                                    [3.1], "o-")],
                                   "hlines": [("full attention", 3.0)], "logx": 2}])
    ax = figs[-1].axes[0]
    points = [line for line in ax.lines if len(line.get_xdata()) == 1]
    assert len(points) == 2 and all(line.get_linestyle() == "None" for line in points)
    assert {t.get_text() for t in ax.texts} == {"window only", "window + first 4 tokens"}


# --- in a real browser ----------------------------------------------------------------------------------------

def _output_dir():
    out = Path(os.environ.get("SINKLAB_TEST_OUTPUT", REPO_ROOT / "test-output"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_report_in_headless_chromium(demo):
    if find_chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("no chromium on PATH: env/setup.sh installs Debian's chromium (env/apt-packages.txt)")
        pytest.skip("no chromium on PATH (env/setup.sh installs it)")
    index = demo["out"] / "index.html"
    shot = _output_dir() / "report_first_screen.png"
    with Browser() as browser:
        page = browser.open(index.as_uri(), width=1400, height=900)
        state = page.evaluate("""(() => {
            const h2 = Array.from(document.querySelectorAll('h2'));
            return {
              scrollWidth: document.documentElement.scrollWidth,
              clientWidth: document.documentElement.clientWidth,
              images: document.images.length,
              broken: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
              firstSection: h2.length ? h2[0].closest('section') && h2[0].closest('section').id : null,
              secondSection: h2.length > 1 ? h2[1].id : null,
              findingsTop: document.getElementById('findings').getBoundingClientRect().top,
              text: document.body.innerText,
              html: document.documentElement.outerHTML,
            };
        })()""")
        page.screenshot(shot)
        errors = page.errors
    print(f"\nfirst screen of the report: {shot}")
    assert errors == [], errors
    assert state["clientWidth"] == 1400 and state["scrollWidth"] <= state["clientWidth"], state["scrollWidth"]
    assert state["images"] == len(list((demo["out"] / "figures").glob("*.png"))) > 20 and not state["broken"]
    assert state["firstSection"] == "findings" and state["secondSection"] == "bbm"
    assert 0 <= state["findingsTop"] < 200  # on the first screen, under the title
    for bad in ("/tmp/", "/root/", str(REPO_ROOT), str(demo["dir"])):
        assert bad not in state["text"] and bad not in state["html"], bad
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10000
