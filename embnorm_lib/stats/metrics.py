"""The metric registry: one entry per metric a report compares, with its direction and the names each page gives it.

A new metric is one `Metric` here; the statistics read its direction, the figures their labels and the findings
their words from this table instead of keeping lists of their own."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str  # the column in runs.csv and family.csv
    lower_is_better: bool
    plot_label: str = ""  # a statistics figure's panel title (publishing/plots.py)
    paper_label: str = ""  # the paper's axis label (analyses/paper_figures.py)
    # FINDINGS.md's words for a secondary endpoint: its name, then the word for a rise and for a fall
    finding_words: tuple[str, str, str] | None = None
    answer_name: str = ""  # the README answer's name for a calibration endpoint (analyses/answer_words.py)


ECE_BINS = 15  # calibration.N_BINS, as the labels say it

_ENTRIES = (
    Metric("val_loss", True, "val loss (nats/char)", "validation loss (nats/char)"),
    Metric("val_acc", False, "next-char accuracy", "next-char accuracy"),
    Metric("ece_equal_width", True, f"ECE ({ECE_BINS} bins)", f"ECE ({ECE_BINS} bins)",
           (f"top-label ECE ({ECE_BINS} equal-width bins)", "worse", "better"), "ECE"),
    Metric("brier", True, "Brier", "Brier score", ("Brier score", "worse", "better"), "the Brier score"),
    Metric("lm_macro_acc", False, "zero-shot macro acc (suite v1, superseded)", "zero-shot macro acc. (suite v1)",
           ("zero-shot macro accuracy, suite v1 (superseded)", "higher", "lower")),
    Metric("lm2_macro_acc", False, paper_label="zero-shot macro acc. (suite v2)"),
    Metric("lm3_macro_acc", False),
    Metric("val_bits_per_byte", True),
    Metric("final_grad_norm", True, "final grad norm"),
    Metric("peak_grad_norm", True, "peak grad norm"),
    Metric("spike_count", True, "loss spikes"),
    Metric("peak_grad_norm_post_warmup", True, "peak grad norm after warm-up"),
    Metric("spike_count_post_warmup", True, "loss spikes after warm-up"),
)
METRICS: dict[str, Metric] = {m.name: m for m in _ENTRIES}


def labels(field: str) -> dict[str, str]:
    """metric -> its label in one page's wording (`plot_label`, `paper_label`, `answer_name`), where it has one."""
    return {m.name: getattr(m, field) for m in _ENTRIES if getattr(m, field)}
