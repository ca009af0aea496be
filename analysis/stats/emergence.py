"""When a sink has emerged: one rule for every finding of the report (training runs, Bigram-Backcopy runs,
the emergence atlas).

A sink has emerged at evaluation i when the measure (Sink_1^eps in percent, or the BOS attention) is at or
above its threshold at i and at every later evaluation of the run: a transient blip that falls back below
is not an emergence, and a run whose last evaluation is below the threshold has no sink (its onset is
censored at its last step). NaN (a missing measurement) counts as below.
"""
import numpy as np

# The paper's line between a sink and none in Sink_k^eps (percent): LMs whose Sink_1^eps "maintains a very small
# value (less than 1%)" are sink-free (App. C, Fig. 28). Sink_k^eps is a share of (probe sequence, layer, head)
# triples (the reference code's per-sample averaging, probe/sink_metrics.hpp), so a sink by it holds in more than
# 1 % of them; the toy-to-text onsets (analysis/stats/bridge.py) and the atlas's paper measure
# (analysis/stats/atlas.py) read it.
SINK_FREE_SHARE = 1.0


def persistent_onset(values, threshold, strict=False):
    """The index of the first evaluation from which `values` stays at or above `threshold` (above it when
    `strict`) to the end; None when the last evaluation is below (or the series is empty)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return None
    with np.errstate(invalid="ignore"):
        ok = v > threshold if strict else v >= threshold
    ok &= ~np.isnan(v)
    if not ok[-1]:
        return None
    below = np.nonzero(~ok)[0]
    return int(below[-1] + 1) if len(below) else 0


def persistent_onset_step(steps, values, threshold, strict=False):
    """persistent_onset as a step number (steps[i]); None when no sink persisted to the last evaluation."""
    i = persistent_onset(values, threshold, strict)
    return None if i is None else int(np.asarray(steps)[i])


def rule_text(measure="the measure", threshold="its threshold", strict=False):
    """The rule in words for one measure and threshold, as a report states it: rule_text("Sink_1^0.3", "0 %",
    strict=True) for the training runs' Sink_1^eps > 0; RULE_TEXT is its general form."""
    above, below = ("above", "not above") if strict else ("at or above", "below")
    return (f"a sink has emerged at the first evaluation from which {measure} stays {above} {threshold} to the "
            f"run's last evaluation (a transient crossing is not an emergence; a run {below} it at its last "
            "evaluation has none, censored at its last step)")


RULE_TEXT = rule_text()
