"""analysis/stats/emergence.py, the one rule for every emergence finding: a sink has emerged at the first evaluation
from which the measure stays at or above (strict: above) its threshold to the last evaluation. The first crossing
(the rule the report used before, issue 44 item 7) fails these where a crossing falls back.
"""
import math

import pytest

np = pytest.importorskip("numpy")

from analysis.stats.emergence import RULE_TEXT, persistent_onset, persistent_onset_step, rule_text  # noqa: E402


@pytest.mark.parametrize("values,threshold,strict,onset", [
    ([0, 12.5, 0, 0, 0], 0, True, None),        # a transient blip: no emergence
    ([0, 6.25, 0, 12.5, 25], 0, True, 3),       # above once, back to 0, then above to the end: the late onset
    ([0, 0, 0, 0, 25], 0, True, 4),             # above at the last evaluation only
    ([0, 0, 0, 0, 0], 0, True, None),           # never
    ([12.5, 25, 25, 50], 0, True, 0),           # above from the first evaluation
    ([0.2, 0.3, 0.3], 0.3, False, 1),           # at the threshold counts ...
    ([0.2, 0.3, 0.3], 0.3, True, None),         # ... unless strict
    ([0.5, 0.29, 0.31, 0.4], 0.3, False, 2),    # a dip below resets the onset
    ([1, math.nan, 1], 0, True, 2),             # a missing measurement counts as below
    ([1, 1, math.nan], 0, True, None),
    ([], 0, True, None),
])
def test_persistent_onset(values, threshold, strict, onset):
    assert persistent_onset(values, threshold, strict) == onset
    assert persistent_onset(np.asarray(values, dtype=float), threshold, strict) == onset


def test_persistent_onset_step_is_the_step_of_the_onset():
    steps = np.array([0, 50, 100, 150, 200])
    assert persistent_onset_step(steps, [0, 6.25, 0, 12.5, 25], 0, strict=True) == 150
    assert persistent_onset_step(steps, [0, 12.5, 0, 0, 0], 0, strict=True) is None
    assert persistent_onset_step(steps, [0.4, 0.5, 0.5, 0.6, 0.7], 0.3) == 0
    assert isinstance(persistent_onset_step(steps.astype(np.int64), [1, 1, 1, 1, 1], 0), int)


def test_the_rule_in_words():
    assert RULE_TEXT == rule_text()
    assert RULE_TEXT.startswith("a sink has emerged at the first evaluation from which the measure stays at or "
                                "above its threshold to the run's last evaluation")
    text = rule_text("Sink_1^0.3", "0 %", strict=True)
    assert "from which Sink_1^0.3 stays above 0 % to the run's last evaluation" in text
    assert "a transient crossing is not an emergence; a run not above it at its last evaluation has none" in text
