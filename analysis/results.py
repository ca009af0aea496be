"""Reads sinklab results files (docs/DESIGN.md, "HDF5 results") into plain numpy arrays, for
analysis.summary and analysis.report.

    with open_results("results/run/results.h5") as rf:
        for run in rf.runs: ...        # /runs/<run>/{train,eval}
        for e in rf.entries: ...       # /models/<model>/<input>/<domain>
        for item in rf.items: ...      # /items/<id> (survey bookkeeping)

Every dataset but a few core ones is optional: a missing or malformed one reads as None and adds a line
to the owner's `notes`, so the callers can skip what is not there and say why. Errors a user can cause
(no such file, not HDF5) raise ResultsError with one line naming the file; a file that opens but holds nothing
to show (an empty HDF5 file, data_prep's survey inputs) is for the callers to refuse, with nothing_to_report's
reason.
"""
import os
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

# Attributes that say a Sink metric was computed from proxy scores (paper Sec. 7.4, Table 6 "*"): the
# writers set proxy_scores (1 or 0) on /runs/<run>/eval and on sinklab-probe's groups; "proxy" is an
# older name no writer uses. Without one nothing is marked.
PROXY_ATTRS = ("proxy_scores", "proxy")
# Attributes worth printing next to a probed model's figures (provenance, quantisation).
NOTE_ATTRS = ("variant", "file_type", "quantization", "quantisation", "dtype", "model_type", "source", "model_dir",
              "checkpoint", "intervention", "t", "note")
DEFAULT_EPS = 0.3

TRAIN_COLUMNS = ("step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "mfu")
# The train columns every writer writes and the readers draw from: a run without one gets a note saying what
# is left out, rather than a blank cell.
TRAIN_NEEDED = {"step": "the training log", "loss": "the training loss"}
MONITOR_DATASETS = {"step": 1, "skipped": 1, "nonfinite_steps": 1, "layer_grad_norm": 2, "update_ratio": 2,
                    "max_abs_activation": 2}
EVENT_COLUMNS = ("step", "kind", "value", "window_mean", "window_std")
EVENT_KINDS = {0: "non-finite step", 1: "loss spike", 2: "grad-norm spike"}


class ResultsError(Exception):
    """A results file that cannot be read; str() is one line naming the file."""


@dataclass
class EvalSeries:
    """/runs/<run>/eval: one row per evaluation."""
    step: np.ndarray                      # [n] int
    valid_loss: np.ndarray                # [n]
    eps: list                             # thresholds of the sink columns
    sink: np.ndarray                      # [n,E] Sink_1^eps in percent
    alpha: np.ndarray = None              # [n,L,H] alpha_1
    massive_ratio: np.ndarray = None      # [n,L]
    sink_star: np.ndarray = None          # [n,E] Sink of the bias position (sink token / k*)
    alpha_star: np.ndarray = None         # [n,L,H]
    massive_ratio_pre_norm: np.ndarray = None  # [n,L] post-norm models: before the block's last norm
    sink_k: np.ndarray = None             # [n,K,E] Sink_k^eps, k = 1..K
    sink_k_intervened: np.ndarray = None  # [n,K,E] the same on inputs carrying the run's data intervention
    alpha_k_intervened: np.ndarray = None  # [n,L,H,K] alpha_k on those inputs
    intervention: str = ""                # what that intervention was (attr "intervention")
    proxy: bool = False                   # an attribute says the sink columns are proxy scores
    # Sliding-window runs: alpha_k / Sink_k relative to each query's window start (probe/sink_metrics.hpp)
    alpha_k_window: np.ndarray = None     # [n,L,H,Kw]
    sink_k_window: np.ndarray = None      # [n,Kw,E]
    # Prefix-LM runs: alpha and Sink of every position 1..T
    alpha_pos: np.ndarray = None          # [n,L,H,T]
    sink_pos: np.ndarray = None           # [n,T,E]
    # Every run's first-token measurements (src/train/evaluation.cpp): the l2 norms of the first token's
    # hidden state (layer output, the residual stream) and value vector beside the mean of the others', and
    # the attention to the first token by query group (attr query_groups; Bigram-Backcopy runs: group 0 =
    # non-trigger queries, BOS included = Guo's "BOS attention", group 1 = trigger queries):
    hnorm_first: np.ndarray = None        # [n,L]
    hnorm_rest: np.ndarray = None         # [n,L]
    vnorm_first: np.ndarray = None        # [n,L]
    vnorm_rest: np.ndarray = None         # [n,L]
    first_attention: np.ndarray = None    # [n,L,H,G] as the sink metric reads A (proxy scores when proxy)
    first_weight_raw: np.ndarray = None   # [n,L,H,G] the raw weights on the first token
    rest_weight_raw: np.ndarray = None    # [n,L,H,G] the mean raw weight of an average other visible key
    query_groups: list = field(default_factory=list)  # names of the G groups
    # Bigram-Backcopy runs (--bbm-meta): the validation loss over copy and over bigram positions, and for rows
    # that start anywhere (no --document-rows) the attention to BOS / <d> inside the rows (NaN: none seen)
    copy_loss: np.ndarray = None          # [n]
    bigram_loss: np.ndarray = None        # [n]
    boundary_attention: np.ndarray = None  # [n,L,H]
    # Where a learned sink can sit besides the first token: the sink logit's share of each text row (sink logit,
    # softmax-plus-one), the sink logits S_h themselves, ||k*||, ||v*|| (KV / K / V biases)
    sink_logit_share: np.ndarray = None   # [n,L,H]
    sink_logit: np.ndarray = None         # [n,L,H]
    k_bias_norm: np.ndarray = None        # [n,L,H]
    v_bias_norm: np.ndarray = None        # [n,L,H]
    bbm_meta: str = ""                    # the task's bbm.json as the run named it (attr bbm_meta)
    window: int = 0                       # sliding-window runs: w (attr window)


@dataclass
class Run:
    name: str
    file: str
    train: dict = None                    # column name -> [steps] array (only the columns present)
    eval: EvalSeries = None
    config: str = ""                      # the run's ini text (attr "config")
    notes: list = field(default_factory=list)
    # The training loop's stability monitor (src/train/monitor.hpp): /runs/<run>/monitor (step, skipped,
    # nonfinite_steps, layer_grad_norm [step,L], update_ratio [step,L], max_abs_activation [step,L]) and
    # /runs/<run>/events (step, kind, value, window_mean, window_std; kinds: EVENT_KINDS).
    monitor: dict = None
    events: dict = None
    init_from: str = ""                   # sinklab-sft: the checkpoint fine-tuned (eval step 0 probes it)
    attrs: dict = field(default_factory=dict)  # the run group's attributes (n_params, cpu_blas, ...)


@dataclass
class ProbeEntry:
    """/models/<model>/<input>/<domain>: one measurement of one model on one input set."""
    model: str
    input: str
    domain: str
    file: str
    attrs: dict
    eps: list
    sink: np.ndarray                      # [E] Sink_1^eps in percent
    arrays: dict                          # every other numeric dataset that passed its shape check
    proxy: bool = False
    notes: list = field(default_factory=list)
    tool: str = ""                        # the program that wrote the file (sinklab-probe, sinklab-survey)
    _group: object = None                 # the open h5py group: large maps are read on demand

    def get(self, name):
        """An optional dataset (None when absent)."""
        return self.arrays.get(name)

    def alpha1(self):
        """alpha_1 per (attention layer, head): alpha[L,H,K][..., 0]."""
        a = self.get("alpha")
        return None if a is None else a[:, :, 0]

    def map_stack(self, name):
        """[P,T,T] maps (qk_cos, qk_normprod, attention_maps), read from the file when asked."""
        if self._group is None or name not in self._group:
            return None
        ds = self._group[name]
        if not isinstance(ds, h5py.Dataset) or ds.ndim != 3 or ds.shape[1] != ds.shape[2]:
            return None
        return ds[...].astype(np.float64)

    def map_pairs(self, name, count):
        """The (layer, head) pair of each of the `count` maps of dataset `name`: from an attribute of
        that dataset ("pairs") or a sibling dataset/attribute (MAP_PAIRS), as an [P,2] integer array or
        "l:h,l:h" text. None when no source gives exactly `count` pairs."""
        g = self._group
        if g is None:
            return None
        candidates = []
        if name in g:
            candidates += [g[name].attrs[k] for k in ("pairs", "heads") if k in g[name].attrs]
        for key in MAP_PAIRS.get(name, ()):
            if key in g.attrs:
                candidates.append(g.attrs[key])
            if key in g and isinstance(g[key], h5py.Dataset):
                candidates.append(g[key][...])
        for value in candidates:
            pairs = parse_pairs(value)
            if pairs is not None and len(pairs) == count:
                return pairs
        return None

    def label(self):
        return f"{self.model} / {self.input} / {self.domain}"


@dataclass
class ChoiceScore:
    """/models/<model>/hellaswag/<domain>: a model's multiple-choice accuracy (the survey's hellaswag input)."""
    model: str
    input: str
    domain: str
    file: str
    acc: float
    acc_norm: float
    n_examples: int


@dataclass
class AblationLoss:
    """/models/<model>/<input>[@T<T>]+<ablation>/<domain> of an attention ablation: the next-token loss alone."""
    model: str
    input: str
    domain: str
    file: str
    attrs: dict
    loss: float


@dataclass
class Item:
    """/items/<id>: one survey work item."""
    id: str
    status: str
    error: str = ""
    rank: object = None
    seconds: object = None


@dataclass
class ResultsFile:
    path: str
    attrs: dict
    runs: list
    entries: list
    items: list
    notes: list
    _h5: object = None
    scores: list = field(default_factory=list)  # ChoiceScore
    ablation_losses: list = field(default_factory=list)  # AblationLoss

    def close(self):
        if self._h5 is not None:
            self._h5.close()
            self._h5 = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def attr_text(value):
    """An attribute as text (h5py gives str, bytes, numpy scalars or arrays)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        return ",".join(attr_text(v) for v in value.ravel())
    if isinstance(value, np.generic):
        return str(value.item())
    return str(value)


def attr_flag(value):
    """A yes/no attribute: 1, true, yes, on (case-insensitive) are yes."""
    return attr_text(value).strip().lower() in ("1", "true", "yes", "on", "1.0")


def parse_eps(value):
    """Thresholds from the "0.2,0.3,0.4" attribute text or a numeric array."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "fiu":
        return [float(v) for v in value.ravel()]
    text = attr_text(value)
    return [float(t) for t in text.replace(";", ",").split(",") if t.strip()]


def eps_index(eps, wanted=DEFAULT_EPS):
    """Index of the threshold equal to `wanted` (else the nearest one); None when there is none."""
    if not eps:
        return None
    return int(np.argmin([abs(e - wanted) for e in eps]))


def match_eps(eps, wanted):
    """Index of threshold `wanted` in `eps` (exact up to rounding), None if absent."""
    for i, e in enumerate(eps):
        if abs(e - wanted) < 1e-9:
            return i
    return None


def _proxy(*objects):
    for obj in objects:
        for name in PROXY_ATTRS:
            if obj is not None and name in obj.attrs:
                return attr_flag(obj.attrs[name])
    return False


def _numeric(group, name, ndim, notes, where):
    """group[name] as a float/int array of rank `ndim` (None when absent or malformed, with a note)."""
    if name not in group:
        return None
    ds = group[name]
    if not isinstance(ds, h5py.Dataset) or ds.dtype.kind not in "fiu":
        notes.append(f"{where}/{name}: not a numeric dataset, ignored")
        return None
    if ndim is not None and ds.ndim != ndim:
        notes.append(f"{where}/{name}: rank {ds.ndim}, expected {ndim}, ignored")
        return None
    return ds[...]


def _read_train(g, notes, where):
    cols = {}
    for name in TRAIN_COLUMNS:
        a = _numeric(g, name, 1, notes, where)
        if a is not None:
            cols[name] = a
    for name in TRAIN_NEEDED:
        if name not in g:  # a malformed one has its note from _numeric
            notes.append(f"{where}: no {name} dataset ({TRAIN_NEEDED[name]} left out)")
    if not cols:
        return None
    n = min(len(a) for a in cols.values())
    if any(len(a) != n for a in cols.values()):
        notes.append(f"{where}: columns of unequal length, cut to {n} rows")
    return {k: v[:n] for k, v in cols.items()}


def _read_rows(g, names, notes, where):
    """The datasets `names` ({name: rank} or a tuple of 1-D names) of a row group, cut to their common
    length; None when none is there."""
    ranks = names if isinstance(names, dict) else {n: 1 for n in names}
    cols = {n: a for n, a in ((n, _numeric(g, n, r, notes, where)) for n, r in ranks.items()) if a is not None}
    if not cols:
        return None
    n = min(len(a) for a in cols.values())
    if any(len(a) != n for a in cols.values()):
        notes.append(f"{where}: datasets of unequal length, cut to {n} rows")
    return {k: v[:n] for k, v in cols.items()}


def _read_eval(g, notes, where):
    step = _numeric(g, "step", 1, notes, where)
    valid_loss = _numeric(g, "valid_loss", 1, notes, where)
    sink = _numeric(g, "sink", 2, notes, where)
    if step is None or valid_loss is None or sink is None:
        notes.append(f"{where}: needs step, valid_loss and sink[step,eps]; evaluation skipped")
        return None
    eps = parse_eps(g.attrs["sink_eps"]) if "sink_eps" in g.attrs else []
    if len(eps) != sink.shape[1]:
        notes.append(f"{where}: attribute sink_eps lists {len(eps)} threshold(s) for {sink.shape[1]} sink "
                     "column(s); thresholds unknown")
        eps = [float("nan")] * sink.shape[1]
    optional = {
        "alpha": _numeric(g, "alpha", 3, notes, where),
        "massive_ratio": _numeric(g, "massive_ratio", 2, notes, where),
        "sink_star": _numeric(g, "sink_star", 2, notes, where),
        "alpha_star": _numeric(g, "alpha_star", 3, notes, where),
        "massive_ratio_pre_norm": _numeric(g, "massive_ratio_pre_norm", 2, notes, where),
        "sink_k": _numeric(g, "sink_k", 3, notes, where),
        "sink_k_intervened": _numeric(g, "sink_k_intervened", 3, notes, where),
        "alpha_k_intervened": _numeric(g, "alpha_k_intervened", 4, notes, where),
        "alpha_k_window": _numeric(g, "alpha_k_window", 4, notes, where),
        "sink_k_window": _numeric(g, "sink_k_window", 3, notes, where),
        "alpha_pos": _numeric(g, "alpha_pos", 4, notes, where),
        "sink_pos": _numeric(g, "sink_pos", 3, notes, where),
        "hnorm_first": _numeric(g, "hnorm_first", 2, notes, where),
        "hnorm_rest": _numeric(g, "hnorm_rest", 2, notes, where),
        "vnorm_first": _numeric(g, "vnorm_first", 2, notes, where),
        "vnorm_rest": _numeric(g, "vnorm_rest", 2, notes, where),
        "first_attention": _numeric(g, "first_attention", 4, notes, where),
        "first_weight_raw": _numeric(g, "first_weight_raw", 4, notes, where),
        "rest_weight_raw": _numeric(g, "rest_weight_raw", 4, notes, where),
        "copy_loss": _numeric(g, "copy_loss", 1, notes, where),
        "bigram_loss": _numeric(g, "bigram_loss", 1, notes, where),
        "boundary_attention": _numeric(g, "boundary_attention", 3, notes, where),
        **{name: _numeric(g, name, 3, notes, where) for name in ("sink_logit_share", "sink_logit", "k_bias_norm",
                                                                 "v_bias_norm")},
    }
    for name in ("sink_k", "sink_k_intervened", "sink_k_window", "sink_pos"):
        if optional[name] is not None and optional[name].shape[2] != sink.shape[1]:
            notes.append(f"{where}/{name}: {optional[name].shape[2]} columns for {sink.shape[1]} thresholds, ignored")
            optional[name] = None
    if optional["sink_star"] is not None and optional["sink_star"].shape[1] != sink.shape[1]:
        notes.append(f"{where}/sink_star: {optional['sink_star'].shape[1]} columns for {sink.shape[1]} "
                     "thresholds, ignored")
        optional["sink_star"] = None
    # A job stopped between two appends can leave one row more in some datasets: keep the common rows.
    present = [step, valid_loss, sink] + [a for a in optional.values() if a is not None]
    n = min(len(a) for a in present)
    if any(len(a) != n for a in present):
        notes.append(f"{where}: datasets of unequal length, cut to {n} rows")
    if n == 0:
        notes.append(f"{where}: no evaluation rows yet")
        return None
    cut = {k: (None if v is None else v[:n]) for k, v in optional.items()}
    groups = [t for t in attr_text(g.attrs.get("query_groups", "")).split(",") if t]
    if cut["first_attention"] is not None and groups and len(groups) != cut["first_attention"].shape[3]:
        notes.append(f"{where}: attribute query_groups names {len(groups)} group(s) for "
                     f"{cut['first_attention'].shape[3]}; names unknown")
        groups = []
    try:
        window = int(float(attr_text(g.attrs.get("window", 0))))
    except ValueError:
        window = 0
    return EvalSeries(step=step[:n].astype(np.int64), valid_loss=valid_loss[:n].astype(np.float64),
                      eps=eps, sink=sink[:n].astype(np.float64), proxy=_proxy(g, g.parent),
                      intervention=attr_text(g.attrs.get("intervention", "")), query_groups=groups,
                      bbm_meta=attr_text(g.attrs.get("bbm_meta", "")), window=window, **cut)


# Optional datasets of a probe/survey entry and their rank (shapes: docs/DESIGN.md, "HDF5 results").
ENTRY_ARRAYS = {
    "alpha": 3,                    # [La,H,K]
    "sink_k": 2,                   # [K,E]
    "sink_star": 1,                # [E]
    "sink_t": 1,                   # [E] intervention items: Sink_t^eps at the intervention's position
    "alpha_star": 2,               # [L,H]
    "massive_ratio": 1,            # [L]
    "massive_ratio_pre_norm": 1,   # [L]
    "hnorm_first": 1, "hnorm_rest": 1,   # [L]
    "knorm_first": 1, "knorm_rest": 1,   # [La]
    "vnorm_first": 1, "vnorm_rest": 1,   # [La]
    "last_to_first": 2,            # [La,H]
    "attention_layers": 1,         # [La] indices of the layers with attention (when not all are)
    "alpha_window": 3,             # [L,H,Kw] sliding window: relative to each query's window start
    "sink_k_window": 2,            # [Kw,E]
    "alpha_pos": 3,                # [L,H,T] prefix LM: every position
    "sink_pos": 2,                 # [T,E]
}
MAP_DATASETS = ("qk_cos", "qk_normprod", "attention_maps")
# Where the (layer, head) pairs of the maps may be stored (dataset or attribute of the entry group).
MAP_PAIRS = {
    "qk_cos": ("qk_pairs", "qk_heads"),
    "qk_normprod": ("qk_pairs", "qk_heads"),
    "attention_maps": ("attention_pairs", "attention_heads"),
}


def parse_pairs(value):
    """[(layer, head), ...] from an [P,2] integer array or "l:h,l:h" text; None if neither."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
        if value.ndim == 2 and value.shape[1] == 2:
            return [(int(a), int(b)) for a, b in value]
        return None
    text = attr_text(value).strip()
    pairs = []
    for part in filter(None, (t.strip() for t in text.split(","))):
        bits = part.split(":")
        if len(bits) != 2:
            return None
        try:
            pairs.append((int(bits[0]), int(bits[1])))
        except ValueError:
            return None
    return pairs


def _read_entry(g, model, inp, domain, path):
    where = g.name
    notes = []
    arrays = {}
    for name, ndim in ENTRY_ARRAYS.items():
        a = _numeric(g, name, ndim, notes, where)
        if a is not None:
            arrays[name] = a if name == "attention_layers" else a.astype(np.float64)
    sink = _numeric(g, "sink", 1, notes, where)
    if sink is None and "sink_k" in arrays:
        sink = arrays["sink_k"][0]  # row 0 of Sink_k^eps is Sink_1^eps
    if "sink_eps" in g:
        eps = parse_eps(g["sink_eps"][...])
    elif "sink_eps" in g.attrs:
        eps = parse_eps(g.attrs["sink_eps"])
    else:
        eps = []
    if sink is None:
        notes.append(f"{where}: no sink (or sink_k) dataset")
        sink = np.zeros(0)
    if len(eps) != len(sink):
        if len(sink):
            notes.append(f"{where}: {len(eps)} threshold(s) in sink_eps for {len(sink)} sink value(s); "
                         "thresholds unknown")
        eps = [float("nan")] * len(sink)
    attrs = {k: g.attrs[k] for k in g.attrs}
    return ProbeEntry(model=model, input=inp, domain=domain, file=path, attrs=attrs, eps=eps,
                      sink=np.asarray(sink, dtype=np.float64), arrays=arrays, proxy=_proxy(g),
                      notes=notes, _group=g)


def _read_item(name, g):
    def value(key):
        if key in g.attrs:
            return g.attrs[key]
        if isinstance(g, h5py.Group) and key in g and isinstance(g[key], h5py.Dataset):
            v = g[key][()]
            return v
        return None

    status, error = value("status"), value("error")
    return Item(id=name, status=attr_text(status) if status is not None else "",
                error=attr_text(error) if error is not None else "",
                rank=value("rank"), seconds=value("seconds"))


def writer_of(command_line):
    """The program named by a root command_line attribute ("sinklab-probe", or the first word of the
    survey's argv, e.g. ".../bin/sinklab-survey --config ..."): the file name of its first word."""
    words = command_line.split()
    return Path(words[0]).name if words else ""


def open_results(path):
    """Opens and reads one results file; raises ResultsError (one line naming the file) on bad input."""
    p = Path(path)
    if not p.exists():
        raise ResultsError(f"{path}: no such file")
    if not p.is_file():
        raise ResultsError(f"{path}: not a regular file")
    try:
        is_h5 = h5py.is_hdf5(str(p))
    except OSError as e:
        raise ResultsError(f"{path}: cannot read: {e}") from None
    if not is_h5:
        raise ResultsError(f"{path}: not an HDF5 file")
    try:
        f = h5py.File(str(p), "r")
    except OSError as e:
        raise ResultsError(f"{path}: cannot open as HDF5: {e}") from None
    if os.environ.get("SINKLAB_SCHEMA_CHECK"):  # the tests: every read below checked (analysis/results_schema.py)
        from analysis.results_schema import watch_reads
        watch_reads(f, os.environ["SINKLAB_SCHEMA_CHECK"])
    notes, runs, entries, items, scores, ablation_losses = [], [], [], [], [], []
    try:
        runs_g = f.get("runs")
        if isinstance(runs_g, h5py.Group):
            for name, g in runs_g.items():
                if not isinstance(g, h5py.Group):
                    continue
                run = Run(name=name, file=str(path), config=attr_text(g.attrs.get("config", "")),
                          attrs={k: g.attrs[k] for k in g.attrs})
                if isinstance(g.get("train"), h5py.Group):
                    run.train = _read_train(g["train"], run.notes, g["train"].name)
                else:
                    run.notes.append(f"{g.name}: no train group (the training log and loss left out)")
                if isinstance(g.get("eval"), h5py.Group):
                    run.eval = _read_eval(g["eval"], run.notes, g["eval"].name)
                if isinstance(g.get("monitor"), h5py.Group):
                    run.monitor = _read_rows(g["monitor"], MONITOR_DATASETS, run.notes, g["monitor"].name)
                if isinstance(g.get("events"), h5py.Group):
                    run.events = _read_rows(g["events"], EVENT_COLUMNS, run.notes, g["events"].name)
                run.init_from = attr_text(g.attrs.get("init_from", ""))
                runs.append(run)
        models_g = f.get("models")
        if isinstance(models_g, h5py.Group):
            for model, mg in models_g.items():
                for inp, ig in (mg.items() if isinstance(mg, h5py.Group) else ()):
                    for domain, dg in (ig.items() if isinstance(ig, h5py.Group) else ()):
                        if not isinstance(dg, h5py.Group):
                            continue
                        if "ablation" in dg.attrs and "sink" not in dg and "loss" in dg.attrs:
                            ablation_losses.append(AblationLoss(model, inp, domain, str(path),
                                                                {k: dg.attrs[k] for k in dg.attrs},
                                                                float(dg.attrs["loss"])))
                        elif "acc" in dg.attrs and "loglik" in dg:
                            scores.append(ChoiceScore(model, inp, domain, str(path), float(dg.attrs["acc"]),
                                                      float(dg.attrs.get("acc_norm", np.nan)),
                                                      int(dg.attrs.get("n_examples", 0))))
                        else:
                            entries.append(_read_entry(dg, model, inp, domain, str(path)))
        items_g = f.get("items")
        if isinstance(items_g, h5py.Group):
            items = [_read_item(name, g) for name, g in items_g.items()]
    except (OSError, KeyError, ValueError) as e:
        f.close()
        raise ResultsError(f"{path}: malformed results file: {e}") from None
    attrs = {k: attr_text(f.attrs[k]) for k in f.attrs}
    tool = writer_of(attrs.get("command_line", ""))
    for e in entries:
        e.tool = tool
    return ResultsFile(path=str(path), attrs=attrs, runs=runs, entries=entries, items=items, notes=notes,
                       _h5=f, scores=scores, ablation_losses=ablation_losses)


def nothing_to_report(rf):
    """Why the open results file `rf` holds nothing a reader can show (a clause for a one-line refusal), or None
    when it holds something: a run with a training log or evaluations, a model's measurement, a survey item, a
    multiple-choice score or an ablation loss."""
    if rf.items or rf.scores or rf.ablation_losses or any(len(e.sink) or e.arrays for e in rf.entries) or \
            any(r.train or r.eval or r.monitor or r.events for r in rf.runs):
        return None
    empty = [f"/runs/{r.name}" for r in rf.runs] + [f"/models/{e.model}/{e.input}/{e.domain}" for e in rf.entries]
    if empty:
        more = f" and {len(empty) - 3} more" if len(empty) > 3 else ""
        return f"nothing to show: {', '.join(empty[:3])}{more} hold(s) no training log, evaluation or measurement"
    top = list(rf._h5.keys()) if rf._h5 is not None else []
    if not top:
        return "not a sinklab results file: an empty HDF5 file (no /runs, /models or /items group)"
    if all(isinstance(rf._h5[k], h5py.Group) and "tokens" in rf._h5[k] for k in top):
        return ("not a sinklab results file: data_prep's survey inputs (/<domain>/tokens), the survey's input, "
                "not its results")
    return f"not a sinklab results file: no /runs, /models or /items group (it holds /{', /'.join(top[:4])})"


def uniform_alpha1(T):
    """alpha_1 of uniform causal attention over T positions: (1/T) sum_i 1/i = H_T / T (the metric's
    mean over rows i = 1..T of A[i, 1], sink_metrics.cpp)."""
    return float(sum(1.0 / i for i in range(1, T + 1)) / T)


def ini_settings(text):
    """`name = value` lines of an ini text (comments and blank lines dropped; the last one wins)."""
    out = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def probe_length(run):
    """The run's --probe-length (its config attribute; sinklab-pretrain's default 64 when absent)."""
    try:
        return int(ini_settings(run.config).get("probe-length", 64))
    except ValueError:
        return None


def mean_alpha1(run):
    """(what, steps, mean alpha_1 over layers and heads per evaluation, uniform baseline H_T / T) of a run,
    or None without alpha. A run trained with a fixed token at position 1 (--fixed-token-position 1: every
    training sequence starts with x_fix, e.g. BOS) is measured on probe inputs that start with it too
    (eval/alpha_k_intervened), as its data did; `what` then says so (else "")."""
    ev, T = run.eval, probe_length(run)
    if ev is None or not len(ev.step) or not T:
        return None
    settings = ini_settings(run.config)
    if settings.get("fixed-token-position", "0") == "1" and ev.alpha_k_intervened is not None:
        a1 = ev.alpha_k_intervened[..., 0]
        what = f"inputs start with token {settings.get('fixed-token-id', '?')}"
    elif ev.alpha is not None:
        a1, what = ev.alpha, ""
    else:
        return None
    return what, ev.step, a1.reshape(len(ev.step), -1).mean(axis=1), uniform_alpha1(T)


def sink_series(r, eps):
    """(steps, Sink_1^eps per evaluation, what the probe fed) of a run: for a run trained with a fixed first
    token (--fixed-token-position 1, e.g. BOS) the probe inputs that start with it (eval/sink_k_intervened,
    as its data did), else eval/sink; None without evaluations at eps."""
    ev = r.eval
    i = None if ev is None or not len(ev.step) else match_eps(ev.eps, eps)
    if i is None:
        return None
    settings = ini_settings(r.config)
    if settings.get("fixed-token-position", "0") == "1" and ev.sink_k_intervened is not None:
        return ev.step, ev.sink_k_intervened[:, 0, i], \
            f"on inputs that start with token {settings.get('fixed-token-id', '?')} as it was trained"
    return ev.step, ev.sink[:, i], ""


def is_bbm(run):
    """A Bigram-Backcopy run (sinklab-pretrain --bbm-meta): its evaluations split the loss into copy and
    bigram positions and the first token's attention by query kind."""
    ev = run.eval
    return ev is not None and (bool(ev.bbm_meta) or ev.copy_loss is not None)


# The emergence atlas's runs are named atlas.<scale>.<cell>.s<seed> (jobs/atlas; analysis/stats/atlas.py reads them).
ATLAS_PREFIX = "atlas."


def is_atlas_run(run):
    """A run of the emergence atlas (run-name atlas.<scale>.<cell>.s<seed>): its own section, analysis/stats/atlas.py."""
    return run.name.startswith(ATLAS_PREFIX)


def bos_attention(ev):
    """Guo et al.'s measure of a Bigram-Backcopy run: the mean attention of the non-trigger queries to BOS
    (eval/first_attention[..., 0]) at the layer and head where it is largest, per evaluation; and that
    (layer, head) at the last evaluation. (None, 0, 0) without the dataset."""
    if ev.first_attention is None or ev.first_attention.shape[3] < 1:
        return None, 0, 0
    fa = ev.first_attention[..., 0]  # [n, L, H], query group 0: non-trigger
    layer, head = (int(x) for x in np.unravel_index(np.argmax(fa[-1]), fa[-1].shape))
    return fa.reshape(len(ev.step), -1).max(axis=1), layer, head


def is_finetuning(run):
    """A fine-tuning run (sinklab-sft: attribute init_from names the checkpoint it started from)."""
    return bool(run.init_from)


def tokens_at(run, step):
    """Training tokens seen after `step` steps (an evaluation's step): the train log's cumulative tokens
    (its row of step s is logged when s + 1 steps are done), else step x global-batch-tokens of the run's
    config; None when neither says."""
    tr = run.train or {}
    if step == 0:
        return 0
    if "step" in tr and "tokens" in tr:
        at = np.nonzero(np.asarray(tr["step"]) == step - 1)[0]
        if len(at):
            return int(tr["tokens"][at[0]])
    try:
        return int(step) * int(float(ini_settings(run.config)["global-batch-tokens"]))
    except (KeyError, ValueError):
        return None


def tokens_text(n):
    """A token count as the page writes it: 614,400 -> "0.61 M", 2.1e9 -> "2.1 B"."""
    if n is None:
        return "?"
    if n >= 1e9:
        return f"{n / 1e9:.3g} B"
    if n >= 1e5:
        return f"{n / 1e6:.3g} M"
    return f"{n:,}"
