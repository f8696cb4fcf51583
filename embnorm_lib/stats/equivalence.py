"""The minimum effect of interest, and equivalence within a margin by two one-sided paired t tests (TOST; Schuirmann 1987), Holm-adjusted over the
comparisons of one family (docs/PROTOCOL.md amendments 17 and 18).

Two arms are *equivalent within ±m* on a metric when both one-sided tests reject: the mean paired difference is
above −m and below +m. The TOST p value is the larger of the two one-sided p values; at α = 0.05 it passes exactly
when the 90% t interval lies inside ±m. A difference test and a TOST can both pass (a real difference smaller than
the margin): the words then say *equivalent*, since the margin is the smallest difference that matters."""
from __future__ import annotations

import numpy as np
from scipy import stats as sps

from .multiple import holm

MEI = 0.01  # the protocol's minimum effect of interest on the primary metric, nats/char
# differences spread by less than this share of their size are one shift up to float rounding (b + 0.1 - b is not
# exactly 0.1): their SD is rounding noise, and a t statistic built on it means nothing (scipy warns of exactly that)
NOISELESS_SPREAD = 1e-12


def noiseless(diffs: np.ndarray) -> bool:
    """The paired differences are one constant shift, exactly or up to float rounding (NOISELESS_SPREAD)."""
    diffs = np.asarray(diffs, dtype=float)
    return len(diffs) > 0 and bool(np.ptp(diffs) <= NOISELESS_SPREAD * np.abs(diffs).max())

# The margin per metric, in the metric's own units: the protocol's MEI (0.01 nats/char) for the final validation
# loss, 0.01 absolute for macro accuracies. A metric without one (ECE, Brier, gradient norms) gets no TOST.
MARGINS: dict[str, float] = {"val_loss": MEI, "best_val_loss": MEI, "lm_macro_acc": 0.01, "lm2_macro_acc": 0.01,
                              # the prose ladder (amendment 17 item 7): 0.01 bits per byte, 0.01 absolute on suite v3
                              "val_bits_per_byte": 0.01, "lm3_macro_acc": 0.01}
EQUIVALENT_WORDS = "equivalent within ±0.01"  # every margin above is 0.01 in its metric's units


def tost_p(diffs, margin: float) -> float:
    """The TOST p value of paired differences against ±margin (NaN below 2 differences)."""
    d = np.asarray(diffs, dtype=float)
    n = len(d)
    if n < 2 or not np.isfinite(d).all():
        return float("nan")
    mean = float(d.mean())
    if noiseless(d):  # one constant shift: no sampling error to test against
        return 0.0 if abs(mean) < margin else 1.0
    se = float(d.std(ddof=1)) / np.sqrt(n)
    above_lower = sps.t.sf((mean + margin) / se, n - 1)  # H0: mean <= -margin
    below_upper = sps.t.cdf((mean - margin) / se, n - 1)  # H0: mean >= +margin
    return float(max(above_lower, below_upper))


def equivalence_columns(metrics: list[str], diffs: list[np.ndarray], alpha: float = 0.05
                        ) -> tuple[list[float], list[float], list[bool]]:
    """Per comparison of one family: the TOST p (NaN where the metric has no margin), its Holm-adjusted value over
    the family's TOSTs, and whether equivalence is shown at alpha after Holm."""
    raw = np.array([tost_p(d, MARGINS[m]) if m in MARGINS else np.nan for m, d in zip(metrics, diffs)], dtype=float)
    passed, adjusted = holm(raw, alpha=alpha)
    return raw.tolist(), adjusted.tolist(), passed.tolist()
