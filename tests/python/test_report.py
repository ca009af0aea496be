"""analysis.report end to end: small synthetic results files in the schema the C++ writers use
(sinklab-pretrain's /runs/<run>/{train,eval}, sinklab-probe's and sinklab-survey's
/models/<model>/<input>/<domain>, the survey's /items/<id>), `python -m analysis.report` on them,
and the tables' CSV read back against the numbers put into the files.
"""
import csv
import subprocess
import sys
from pathlib import Path

import pytest

h5py = pytest.importorskip("h5py")
np = pytest.importorskip("numpy")
pytest.importorskip("matplotlib")

REPO_ROOT = Path(__file__).resolve().parents[2]
EPS = [0.2, 0.3, 0.4]
L, H, K, T = 3, 4, 2, 8


def _root_attrs(f, cmd):
    f.attrs["sinklab_version"] = "0.1.0"
    f.attrs["git_sha"] = "cafe"
    f.attrs["created_utc"] = "2025-01-01T00:00:00Z"
    f.attrs["command_line"] = cmd
    f.attrs["config"] = ""


def _write_run(f, name, rng, steps, eval_steps, extras=False, proxy=False, optional=True):
    g = f.create_group(f"/runs/{name}")
    g.attrs["config"] = f"run_name = {name}\n"
    tr = g.create_group("train")
    n = len(steps)
    cols = {"step": np.array(steps, dtype=np.int64), "tokens": np.array(steps, dtype=np.int64) * 512,
            "loss": np.linspace(5, 3, n) + rng.random(n) * 0.01, "lr": np.full(n, 4e-4),
            "grad_norm": rng.random(n) + 0.5, "tokens_per_s": rng.random(n) * 1e4 + 1e3}
    for k, v in cols.items():
        tr.create_dataset(k, data=v, maxshape=(None,), chunks=True, compression="gzip")
    if eval_steps is None:
        return cols, None
    ev = g.create_group("eval")
    ev.attrs["sink_eps"] = ",".join(f"{e:g}" for e in EPS)
    m = len(eval_steps)
    data = {"step": np.array(eval_steps, dtype=np.int64), "valid_loss": rng.random(m) + 3,
            "sink": rng.random((m, len(EPS))) * 100}
    if optional:
        data["alpha"] = rng.random((m, L, H))
        data["massive_ratio"] = rng.random((m, L)) * 50
    if extras:
        data["sink_star"] = rng.random((m, len(EPS))) * 100
        data["alpha_star"] = rng.random((m, L, H))
        data["massive_ratio_pre_norm"] = rng.random((m, L)) * 80
    for k, v in data.items():
        ev.create_dataset(k, data=v, chunks=True, compression="gzip")
    if proxy:
        ev.attrs["proxy_scores"] = np.int64(1)
    return cols, data


def _write_entry(f, model, inp, domain, rng, survey=False, maps=False):
    g = f.create_group(f"/models/{model}/{inp}/{domain}")
    d = {"alpha": rng.random((L, H, K)), "sink": rng.random(len(EPS)) * 100,
         "sink_eps": np.array(EPS), "massive_ratio": rng.random(L) * 40}
    if survey:
        d["sink_k"] = np.stack([d["sink"], rng.random(len(EPS)) * 10])  # [K,E], row 0 = Sink_1
        for k in ("hnorm_first", "hnorm_rest", "knorm_first", "knorm_rest", "vnorm_first", "vnorm_rest"):
            d[k] = rng.random(L) * 10
        d["last_to_first"] = rng.random((L, H))
    if maps:
        d["qk_cos"] = rng.random((2, T, T)).astype(np.float32)
        d["qk_normprod"] = rng.random((2, T, T)).astype(np.float32)
        d["attention_maps"] = rng.random((1, T, T)).astype(np.float32)
        d["qk_pairs"] = np.array([[0, 1], [2, 3]], dtype=np.int32)
        d["attention_pairs"] = np.array([[1, 0]], dtype=np.int32)
    for k, v in d.items():
        g.create_dataset(k, data=v)
    g.attrs["n_seq"] = np.int64(100)
    g.attrs["T"] = np.int64(T)
    g.attrs["bos"] = np.int64(0)
    if survey:
        g.attrs["quantization"] = "bf16"
        g.attrs["source"] = "m.gguf"
        d["loss"] = 3 + rng.random()
        g.attrs["loss"] = d["loss"]
    return d


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("results")
    rng = np.random.default_rng(7)
    truth = {"runs": {}, "models": {}, "interventions": {}}
    with h5py.File(d / "runs.h5", "w") as f:
        _root_attrs(f, "sinklab-pretrain --config jobs/pretrain/tiny.ini")
        truth["runs"]["softmax"] = _write_run(f, "softmax", rng, list(range(1, 11)), [0, 5, 10])
        # The second run evaluates at a step the first does not (7): the comparison has a blank there.
        truth["runs"]["sigmoid_nonorm"] = _write_run(f, "sigmoid_nonorm", rng, list(range(1, 11)), [0, 5, 7, 10],
                                                     extras=True, proxy=True)
    with h5py.File(d / "models.h5", "w") as f:
        _root_attrs(f, "sinklab-survey --config jobs/survey.ini")
        for model in ("model_a", "model_b"):
            survey = model == "model_a"
            for domain in ("pile_cc", "github"):
                truth["models"][(model, "natural", domain)] = _write_entry(
                    f, model, "natural", domain, rng, survey=survey, maps=survey and domain == "pile_cc")
            for inp in ("random", "repeat"):
                truth["models"][(model, inp, "-")] = _write_entry(f, model, inp, "-", rng, survey=survey)
        # A Table 7 intervention item (sinklab-survey: input label "<input>+<tag>", sink_t, attrs).
        for domain in ("pile_cc", "github"):
            iv = _write_entry(f, "model_a", "natural+swap_3", domain, rng, survey=True)
            g = f[f"/models/model_a/natural+swap_3/{domain}"]
            iv["sink_t"] = rng.random(len(EPS)) * 100
            g.create_dataset("sink_t", data=iv["sink_t"])
            g.attrs["intervention"] = "swap"
            g.attrs["t"] = np.int64(3)
            truth["interventions"][domain] = iv
        for i, status in enumerate(("ok", "failed")):
            it = f.create_group(f"/items/{i:04d}")
            it.attrs["status"] = status
            it.attrs["error"] = "" if status == "ok" else "out of memory"
            it.attrs["rank"] = np.int64(i)
            it.attrs["seconds"] = 1.5 * (i + 1)
    with h5py.File(d / "train_only.h5", "w") as f:
        _root_attrs(f, "sinklab-pretrain")
        _write_run(f, "solo", rng, list(range(1, 6)), None)
    with h5py.File(d / "sparse.h5", "w") as f:
        _root_attrs(f, "sinklab-probe")
        _write_run(f, "bare", rng, list(range(1, 4)), [0, 3], optional=False)
        # Stopped before its first evaluation: sinklab-pretrain has made the eval group, nothing in it.
        _write_run(f, "early", rng, [1, 2], None)
        f["/runs/early"].create_group("eval").attrs["sink_eps"] = "0.2,0.3,0.4"
        g = f.create_group("/models/tiny/natural/pile_cc")
        g.create_dataset("sink", data=np.array([10.0, 5.0, 1.0]))
        g.create_dataset("sink_eps", data=np.array(EPS))
        f.create_group("/models/tiny/random/-")  # nothing at all in it
    (d / "notes.txt").write_text("not hdf5\n")
    return d, truth


def _report(paths, out, *extra):
    return subprocess.run([sys.executable, "-m", "analysis.report", *map(str, paths), "-o", str(out), *extra],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _num(text):
    return float(text) if text != "" else None


def _skipped(page):
    """The page's list of skipped parts (one line per reason: "Why: what, what.")."""
    return page.split('id="skipped"')[1] if 'id="skipped"' in page else ""


def _check_page(out):
    page = (out / "index.html").read_text()
    pngs = sorted((out / "figures").glob("*.png"))
    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", p
        assert f'src="figures/{p.name}"' in page, p.name
    for t in (out / "tables").glob("*.csv"):
        assert (out / "tables" / (t.stem + ".md")).exists(), t
        assert f'href="tables/{t.name}"' in page, t.name
    return page, {p.stem for p in pngs}


@pytest.fixture(scope="module")
def full(files, tmp_path_factory):
    d, truth = files
    out = tmp_path_factory.mktemp("report")
    proc = _report([d / "runs.h5", d / "models.h5"], out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, truth


def test_runs_tables(full):
    out, truth = full
    rows = {r["run"]: r for r in _csv(out / "tables" / "runs.csv")}
    assert set(rows) == {"softmax", "sigmoid_nonorm"}
    for name, (train, ev) in truth["runs"].items():
        r = rows[name]
        assert int(r["train steps"]) == len(train["loss"])
        assert _num(r["last train loss"]) == pytest.approx(train["loss"][-1], rel=1e-12)
        assert int(r["last eval step"]) == ev["step"][-1]
        assert _num(r["valid loss"]) == pytest.approx(ev["valid_loss"][-1], rel=1e-12)
        for i, e in enumerate(EPS):
            assert _num(r[f"Sink_1^{e:g}"]) == pytest.approx(ev["sink"][-1, i], rel=1e-12)
        assert _num(r["massive ratio (last layer)"]) == pytest.approx(ev["massive_ratio"][-1, -1], rel=1e-12)
    sig = truth["runs"]["sigmoid_nonorm"][1]
    assert _num(rows["sigmoid_nonorm"]["Sink_*^0.3"]) == pytest.approx(sig["sink_star"][-1, 1], rel=1e-12)
    assert rows["softmax"]["Sink_*^0.3"] == ""
    # The proxy attribute of the sigmoid run marks its Sink values "*" (and only those).
    assert rows["sigmoid_nonorm"]["proxy"] == "yes" and rows["softmax"]["proxy"] == ""
    md = (out / "tables" / "runs.md").read_text()
    assert f"{sig['sink'][-1, 1]:.2f}*" in md
    soft = truth["runs"]["softmax"][1]
    assert f"{soft['sink'][-1, 1]:.2f}*" not in md and f"{soft['sink'][-1, 1]:.2f}" in md

    # Per-run evaluation table: every row.
    for name, (_, ev) in truth["runs"].items():
        rows = _csv(out / "tables" / f"run_{name}_eval.csv")
        assert [int(r["step"]) for r in rows] == list(ev["step"])
        for k, r in enumerate(rows):
            assert _num(r["valid loss"]) == pytest.approx(ev["valid_loss"][k], rel=1e-12)
            for i, e in enumerate(EPS):
                assert _num(r[f"Sink_1^{e:g}"]) == pytest.approx(ev["sink"][k, i], rel=1e-12)
        train = _csv(out / "tables" / f"run_{name}_train.csv")
        assert len(train) == 10 and _num(train[3]["loss"]) == pytest.approx(truth["runs"][name][0]["loss"][3])


def test_runs_side_by_side(full):
    out, truth = full
    rows = _csv(out / "tables" / "runs_compare.csv")
    assert [int(r["step"]) for r in rows] == [0, 5, 7, 10]
    for name, (_, ev) in truth["runs"].items():
        at = {int(s): k for k, s in enumerate(ev["step"])}
        for r in rows:
            s = int(r["step"])
            vl, sk = _num(r[f"valid loss {name}"]), _num(r[f"Sink_1^0.3 {name}"])
            if s in at:
                assert vl == pytest.approx(ev["valid_loss"][at[s]], rel=1e-12)
                assert sk == pytest.approx(ev["sink"][at[s], 1], rel=1e-12)
            else:
                assert vl is None and sk is None


def test_table1_and_per_domain(full):
    out, truth = full
    models = truth["models"]
    rows = {r["model"]: r for r in _csv(out / "tables" / "table1.csv")}
    assert set(rows) == {"model_a", "model_b"}
    assert list(_csv(out / "tables" / "table1.csv")[0].keys()) == ["model", "natural", "random", "repeat"]
    for m in rows:
        natural = np.mean([models[(m, "natural", d)]["sink"][1] for d in ("pile_cc", "github")])
        assert _num(rows[m]["natural"]) == pytest.approx(natural, rel=1e-12)
        for inp in ("random", "repeat"):
            assert _num(rows[m][inp]) == pytest.approx(models[(m, inp, "-")]["sink"][1], rel=1e-12)
    long = _csv(out / "tables" / "table1_all_eps.csv")
    got = {(r["model"], r["input"], float(r["eps"])): _num(r["Sink_1"]) for r in long}
    assert got[("model_b", "natural", 0.2)] == pytest.approx(
        np.mean([models[("model_b", "natural", d)]["sink"][0] for d in ("pile_cc", "github")]), rel=1e-12)
    assert got[("model_a", "repeat", 0.4)] == pytest.approx(models[("model_a", "repeat", "-")]["sink"][2])
    iv = _csv(out / "tables" / "interventions.csv")
    assert len(iv) == 1 and iv[0]["input"] == "natural+swap_3" and iv[0]["intervention"] == "swap"
    assert iv[0]["t"] == "3" and iv[0]["domains"] == "2"
    ivt = truth["interventions"]
    assert _num(iv[0]["Sink_1^0.3"]) == pytest.approx(np.mean([d["sink"][1] for d in ivt.values()]), rel=1e-12)
    assert _num(iv[0]["Sink_t^0.3"]) == pytest.approx(np.mean([d["sink_t"][1] for d in ivt.values()]), rel=1e-12)
    per = [r for r in _csv(out / "tables" / "per_domain.csv") if "+" not in r["input"]]
    assert len(per) == len(models)
    for r in per:
        d = models[(r["model"], r["input"], r["domain"])]
        for i, e in enumerate(EPS):
            assert _num(r[f"Sink_1^{e:g}"]) == pytest.approx(d["sink"][i], rel=1e-12)
        assert _num(r["massive ratio (last layer)"]) == pytest.approx(d["massive_ratio"][-1], rel=1e-12)
        assert r["n_seq"] == "100" and r["T"] == str(T)
        assert r["measured by"] == "sinklab-survey" and r["file"] == "models.h5"
        assert _num(r["loss"]) == (pytest.approx(d["loss"], rel=1e-12) if "loss" in d else None)
    # Inputs, loss (mean over domains) and weights per model and input.
    inputs = {(r["model"], r["input"]): r for r in _csv(out / "tables" / "inputs.csv")}
    assert set(inputs) == {(m, i) for m in ("model_a", "model_b") for i in ("natural", "random", "repeat",
                                                                             "natural+swap_3")} - {("model_b", "natural+swap_3")}
    a = inputs[("model_a", "natural")]
    assert _num(a["loss"]) == pytest.approx(np.mean([models[("model_a", "natural", d)]["loss"]
                                                     for d in ("pile_cc", "github")]), rel=1e-12)
    assert (a["domains"], a["sequences"], a["T"], a["first token"]) == ("2", "200", str(T), "0")
    assert (a["source"], a["quantization"]) == ("m.gguf", "bf16")
    b = inputs[("model_b", "random")]
    assert (b["loss"], b["source"], b["quantization"], b["sequences"]) == ("", "?", "?", "100")
    sk = _csv(out / "tables" / "sink_k.csv")
    a = models[("model_a", "natural", "github")]["sink_k"]
    got = {int(r["k"]): _num(r["Sink_k^0.3"]) for r in sk
           if r["model"] == "model_a" and r["input"] == "natural" and r["domain"] == "github"}
    assert got == {1: pytest.approx(a[0, 1]), 2: pytest.approx(a[1, 1])}
    # On the page the pivot (k across), the long form in the CSV only.
    wide = _csv(out / "tables" / "sink_k_by_position.csv")
    row = next(r for r in wide if (r["model"], r["input"], r["domain"]) == ("model_a", "natural", "github"))
    assert (_num(row["k = 1"]), _num(row["k = 2"])) == (pytest.approx(a[0, 1]), pytest.approx(a[1, 1]))
    assert len(wide) * 2 == len(sk)
    page = (out / "index.html").read_text()
    shown = page.split('id="tab-sink_k"')[1].split("</div>")[0]
    assert f"{len(sk)} rows: see the CSV." in shown and "<table>" not in shown
    assert "<th>k = 2</th>" in page.split('id="tab-sink_k_by_position"')[1].split("</table>")[0]


def test_figures_and_page(full):
    out, _ = full
    page, figs = _check_page(out)
    for name in ("runs_compare", "runs_massive_ratio", "runs_mean_alpha1", "run_softmax_mean_alpha1",
                 "run_softmax_curves", "run_sigmoid_nonorm_massive_ratio",
                 "run_softmax_alpha1", "run_sigmoid_nonorm_alpha_star", "table1_bars",
                 "model_a_natural_norms", "model_a_natural_alpha1", "model_a_natural_massive_ratio",
                 "model_a_natural_last_to_first", "model_a_natural_qk", "model_a_natural_attention",
                 "model_b_repeat_alpha1", "model_b_random_massive_ratio"):
        assert name in figs, name
    assert "model_b_natural_norms" not in figs  # probe-only model: no norms, said so on the page
    assert "No hnorm_/knorm_/vnorm_first and _rest datasets (l2 norms of h/k/v): model_b / natural" in _skipped(page)
    # Captions carry model, input, domain, T, n_seq and the quantisation attribute.
    assert "model_a | input natural | domain mean of 2 (github, pile_cc) | T=8 | n_seq=100 | first token=0 | " \
           "quantization: bf16" in page
    assert not any("swap" in name for name in figs)  # intervention inputs: tables only
    # The maps of one domain: captioned with that domain.
    assert "model_a | input natural | domain pile_cc | T=8" in page
    # The page opens with the results; what was read (files, runs, models), the proxy statement, the
    # failed survey item and the skipped sections close it.
    top, end = page.split('id="summary"')
    assert top.index('id="runs"') < top.index('id="models"') and 'id="skipped"' not in top
    assert "runs.h5" in end and "models.h5" in end and "sigmoid_nonorm" in end and "model_b" in end
    assert "as the files say for: sigmoid_nonorm" in end
    assert "1 survey item(s) not ok: 0001" in end and "model_b / natural" in _skipped(end)
    items = {r["id"]: r for r in _csv(out / "tables" / "items.csv")}
    assert items["0001"]["status"] == "failed" and items["0001"]["error"] == "out of memory"


def test_training_only_and_sparse_files(files, tmp_path):
    d, _ = files
    proc = _report([d / "train_only.h5"], tmp_path / "a")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page, figs = _check_page(tmp_path / "a")
    assert "run_solo_curves" in figs
    assert "probed models" in _skipped(page)
    rows = _csv(tmp_path / "a" / "tables" / "runs.csv")
    assert rows[0]["run"] == "solo" and rows[0]["evals"] == "0"

    proc = _report([d / "sparse.h5"], tmp_path / "b")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page, figs = _check_page(tmp_path / "b")
    assert "run_bare_curves" in figs and "run_bare_alpha1" not in figs
    assert "No massive_ratio dataset (massive-activation ratio per layer): run bare" in _skipped(page)
    assert "run_early_curves" in figs and "/runs/early/eval: needs step, valid_loss and sink" in page
    runs = {r["run"]: r for r in _csv(tmp_path / "b" / "tables" / "runs.csv")}
    assert runs["early"]["evals"] == "0" and runs["bare"]["evals"] == "2"
    assert "(alpha_1 heatmap): tiny / natural" in _skipped(page)
    rows = _csv(tmp_path / "b" / "tables" / "table1.csv")
    assert rows == [{"model": "tiny", "natural": "5.0", "random": ""}]
    assert "/models/tiny/random/-: no sink (or sink_k) dataset" in page


def test_probe_and_survey_of_one_name_are_kept_apart(tmp_path):
    """The same model name measured by sinklab-probe in one file and by sinklab-survey in another (as the demo
    once named both tiny_softmax): two rows, each saying which program measured it, not one pooled row. Two
    survey files of one model (different domains) still pool into one row."""
    rng = np.random.default_rng(11)
    truth = {}
    with h5py.File(tmp_path / "probe.h5", "w") as f:
        _root_attrs(f, "sinklab-probe")
        truth["probe"] = _write_entry(f, "tiny_softmax", "natural", "valid", rng)
    for name, domain in (("survey.h5", "pile_cc"), ("survey_more.h5", "github")):
        with h5py.File(tmp_path / name, "w") as f:
            _root_attrs(f, "/work/build/bin/sinklab-survey --model x --output " + name)
            truth[domain] = _write_entry(f, "tiny_softmax", "natural", domain, rng, survey=True)
    out = tmp_path / "report"
    proc = _report([tmp_path / "probe.h5", tmp_path / "survey.h5", tmp_path / "survey_more.h5"], out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["model"]: r for r in _csv(out / "tables" / "table1.csv")}
    assert set(rows) == {"tiny_softmax [sinklab-probe]", "tiny_softmax [sinklab-survey]"}
    assert _num(rows["tiny_softmax [sinklab-probe]"]["natural"]) == pytest.approx(truth["probe"]["sink"][1])
    assert _num(rows["tiny_softmax [sinklab-survey]"]["natural"]) == pytest.approx(
        np.mean([truth[d]["sink"][1] for d in ("pile_cc", "github")]), rel=1e-12)
    per = {(r["model"], r["domain"]): r for r in _csv(out / "tables" / "per_domain.csv")}
    assert {k: (r["measured by"], r["file"]) for k, r in per.items()} == {
        ("tiny_softmax [sinklab-probe]", "valid"): ("sinklab-probe", "probe.h5"),
        ("tiny_softmax [sinklab-survey]", "pile_cc"): ("sinklab-survey", "survey.h5"),
        ("tiny_softmax [sinklab-survey]", "github"): ("sinklab-survey", "survey_more.h5")}
    inputs = {r["model"]: r for r in _csv(out / "tables" / "inputs.csv")}
    assert inputs["tiny_softmax [sinklab-survey]"]["measured by"] == "sinklab-survey"
    assert inputs["tiny_softmax [sinklab-survey]"]["domains"] == "2"
    assert inputs["tiny_softmax [sinklab-probe]"]["measured by"] == "sinklab-probe"
    page = (out / "index.html").read_text()
    assert "tiny_softmax [sinklab-probe]: natural (1 domain(s)); measured by sinklab-probe" in page


def test_bad_input_is_one_line(files, tmp_path):
    d, _ = files
    for path, why in ((d / "notes.txt", "not an HDF5 file"), (d / "missing.h5", "no such file")):
        proc = _report([d / "runs.h5", path], tmp_path / "bad")
        assert proc.returncode == 1
        assert proc.stderr == f"analysis.report: error: {path}: {why}\n"
        assert proc.stdout == ""
        assert not (tmp_path / "bad" / "index.html").exists()


def test_summary_uses_the_same_reader(files):
    d, truth = files
    proc = subprocess.run([sys.executable, "-m", "analysis.summary", str(d / "runs.h5"), str(d / "models.h5")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    ev = truth["runs"]["softmax"][1]
    assert f"{ev['valid_loss'][-1]:>11.4f}" in proc.stdout
    assert "model_a" in proc.stdout and "eps=0.3" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "analysis.summary", str(d / "notes.txt")], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "not an HDF5 file" in proc.stderr


def test_uniform_alpha1_baseline():
    """The baseline of the mean-alpha_1 figures: alpha_1 of uniform causal attention, H_T / T (row i
    attends 1/i to the first token; alpha_1 is the mean over the T rows), e.g. 0.0741 at T = 64."""
    from analysis.results import uniform_alpha1

    for T in (1, 2, 7, 64):
        attn = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
        assert uniform_alpha1(T) == pytest.approx(attn[:, 0].mean(), rel=1e-12)
    assert round(uniform_alpha1(64), 4) == 0.0741


def test_mean_alpha1_of_a_fixed_first_token_run_reads_its_intervened_probe():
    """A run trained with x_fix at position 1 (BOS) is measured on probe inputs that start with it
    (eval/alpha_k_intervened[..., 0]); other runs on plain text (eval/alpha)."""
    from analysis.results import EvalSeries, Run, mean_alpha1, uniform_alpha1

    steps = np.array([0, 5])
    plain = np.full((2, L, H), 0.1)
    moved = np.stack([np.full((L, H, K), 0.2), np.full((L, H, K), 0.3)])
    moved[..., 1] = 0.9  # alpha_2 must not be read
    ev = EvalSeries(step=steps, valid_loss=np.ones(2), eps=EPS, sink=np.zeros((2, 3)), alpha=plain,
                    alpha_k_intervened=moved)
    bos = Run(name="bos", file="x", eval=ev, config="probe-length = 12\nfixed-token-position = 1\nfixed-token-id = 1\n")
    what, s, a1, base = mean_alpha1(bos)
    assert what == "inputs start with token 1" and list(s) == [0, 5]
    np.testing.assert_allclose(a1, [0.2, 0.3])
    assert base == uniform_alpha1(12)
    for config in ("probe-length = 12\n", "probe-length = 12\nfixed-token-position = 2\n"):
        what, _, a1, _ = mean_alpha1(Run(name="r", file="x", eval=ev, config=config))
        assert what == ""
        np.testing.assert_allclose(a1, [0.1, 0.1])


def test_real_models_are_named_with_variant_and_quantisation():
    """A model imported from a GGUF file (the survey copied sinklab_source.json's variant and file_type into its
    items) is named "name (variant, file_type)" in every table and figure; models without them keep their name."""
    from types import SimpleNamespace

    from analysis.sections.labels import model_labels

    def entry(model, attrs, file="r.h5"):
        return SimpleNamespace(model=model, attrs=attrs, tool="sinklab-survey", file=file, input="natural", domain="-")

    entries = [entry("gemma3-270m", {"variant": "base", "file_type": "Q4_K_M"}),
               entry("qwen2.5-coder-0.5b", {"variant": "instruct", "file_type": "Q4_K_M of an AWQ checkpoint"}),
               entry("tiny", {})]
    assert model_labels(entries) == ["gemma3-270m (base, Q4_K_M)",
                                     "qwen2.5-coder-0.5b (instruct, Q4_K_M of an AWQ checkpoint)", "tiny"]
