"""Calibration of next-character predictions on the whole validation split.

Library-computed where a library has the metric: equal-width top-label ECE (torchmetrics), temperature fit (scipy).
The multi-class Brier score is written out (see brier_score); the equal-mass ECE has no library implementation, it
shares the binning code that the tests check against torchmetrics."""
from __future__ import annotations

import math

import numpy as np
import torch
from torch.nn import functional as F

N_BINS = 15
TEMPERATURE_GRID = tuple(float(t) for t in np.round(np.exp(np.linspace(math.log(0.5), math.log(2.0), 25)), 4))


def equal_width_edges(confidence: torch.Tensor, n_bins: int = N_BINS) -> torch.Tensor:
    return torch.linspace(0.0, 1.0, n_bins + 1, device=confidence.device)


def equal_mass_edges(confidence: torch.Tensor, n_bins: int = N_BINS) -> torch.Tensor:
    q = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64, device=confidence.device)
    edges = torch.quantile(confidence.double(), q).float()
    edges[0], edges[-1] = 0.0, 1.0
    return edges


def reliability_table(confidence: torch.Tensor, correct: torch.Tensor, edges: torch.Tensor) -> dict[str, list]:
    """Per bin (lower, upper]: sample count, mean confidence, accuracy. The first bin includes 0."""
    bins = torch.bucketize(confidence, edges[1:-1], right=False)
    n_bins = len(edges) - 1
    count = torch.bincount(bins, minlength=n_bins).double()
    conf_sum = torch.bincount(bins, weights=confidence.double(), minlength=n_bins)
    acc_sum = torch.bincount(bins, weights=correct.double(), minlength=n_bins)
    safe = count.clamp(min=1)
    return {"lower": edges[:-1].tolist(), "upper": edges[1:].tolist(), "count": count.long().tolist(),
            "confidence": (conf_sum / safe).tolist(), "accuracy": (acc_sum / safe).tolist()}


def expected_calibration_error(table: dict[str, list]) -> float:
    count = np.asarray(table["count"], dtype=float)
    gap = np.abs(np.asarray(table["accuracy"]) - np.asarray(table["confidence"]))
    return float((count / count.sum() * gap).sum())


def library_ece(probs: torch.Tensor, targets: torch.Tensor, n_bins: int = N_BINS) -> float:
    from torchmetrics.functional.classification import multiclass_calibration_error

    return multiclass_calibration_error(probs, targets, num_classes=probs.shape[-1], n_bins=n_bins,
                                        norm="l1").item()


def brier_score(probs: torch.Tensor, targets: torch.Tensor) -> float:
    """Multi-class Brier: mean over samples of the squared distance to the one-hot truth (0 is perfect).

    Written out rather than taken from scikit-learn: `brier_score_loss` accepts `labels=` (needed when a batch lacks
    some classes) only since 1.7, and Kaggle/Colab images ship older ones. The same float64 operations in the same
    order as scikit-learn's, so runs scored either way agree bit for bit (tests/test_diagnostics.py)."""
    p = (probs.double() / probs.double().sum(-1, keepdim=True)).cpu().numpy()  # the fleet calibrates on its device
    truth = np.zeros_like(p)
    truth[np.arange(len(p)), targets.cpu().numpy()] = 1.0
    return float(np.mean(np.sum((truth - p) ** 2, axis=1)))


def nll_at_temperature(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> float:
    return F.cross_entropy(logits / temperature, targets).item()


def optimal_temperature(logits: torch.Tensor, targets: torch.Tensor) -> tuple[float, float]:
    from scipy.optimize import minimize_scalar

    result = minimize_scalar(lambda log_t: nll_at_temperature(logits, targets, math.exp(log_t)),
                             bounds=(math.log(0.05), math.log(20.0)), method="bounded",
                             options={"xatol": 1e-4})
    return math.exp(result.x), float(result.fun)


def calibration_from_logits(logits: torch.Tensor, targets: torch.Tensor, n_bins: int = N_BINS) -> dict:
    logits = logits.reshape(-1, logits.shape[-1]).float()
    targets = targets.reshape(-1)
    probs = logits.softmax(-1)
    confidence, prediction = probs.max(-1)
    correct = prediction == targets
    width_table = reliability_table(confidence, correct, equal_width_edges(confidence, n_bins))
    mass_table = reliability_table(confidence, correct, equal_mass_edges(confidence, n_bins))
    t_opt, nll_opt = optimal_temperature(logits, targets)
    return {
        "ece_equal_width": library_ece(probs, targets, n_bins),
        "ece_equal_mass": expected_calibration_error(mass_table),
        "brier": brier_score(probs, targets),
        "mean_confidence": confidence.mean().item(),
        "nll_t1": nll_at_temperature(logits, targets, 1.0),
        "temperature_opt": t_opt,
        "nll_t_opt": nll_opt,
        "reliability_equal_width": width_table,
        "reliability_equal_mass": mass_table,
        "temperature_curve": {"temperature": list(TEMPERATURE_GRID),
                              "nll": [nll_at_temperature(logits, targets, t) for t in TEMPERATURE_GRID]},
    }


def _chunks(logits: np.ndarray, targets: torch.Tensor, windows: int):
    for i in range(0, len(targets), windows):
        part = torch.from_numpy(np.asarray(logits[i: i + windows])).reshape(-1, logits.shape[-1])
        yield part, targets[i: i + windows].reshape(-1)


def calibration_streamed(logits: np.ndarray, targets: torch.Tensor, n_bins: int = N_BINS, windows: int = 16,
                         temperature_windows: int = 256) -> dict:
    """calibration_from_logits for logits kept in a file (a numpy memmap of windows x T x V), read `windows` windows
    at a time: the ECEs, Brier score, mean confidence and NLL over every token, never more than a chunk of
    probabilities in memory (the top-label confidences and hits, one number per token, are kept; the equal-width ECE
    comes from the binning that tests hold equal to torchmetrics'; the Brier and NLL sums accumulate in float64).
    Temperature scaling (not an endpoint) is fitted on `temperature_windows` evenly spaced windows: fitted on all
    of them it took ~50 passes over 6.4 GB, minutes per run."""
    targets = targets.reshape(len(targets), -1)
    confidences, hits, brier_sum, nll_sum = [], [], 0.0, 0.0
    for part, t in _chunks(logits, targets, windows):
        probs = part.softmax(-1)
        confidence, prediction = probs.max(-1)
        confidences.append(confidence)
        hits.append(prediction == t)
        p = probs.double() / probs.double().sum(-1, keepdim=True)
        brier_sum += float((p.pow(2).sum(-1) - 2 * p.gather(1, t[:, None]).squeeze(1) + 1).sum())
        nll_sum += F.cross_entropy(part, t, reduction="sum").item()
    confidence, correct = torch.cat(confidences), torch.cat(hits)
    width_table = reliability_table(confidence, correct, equal_width_edges(confidence, n_bins))
    mass_table = reliability_table(confidence, correct, equal_mass_edges(confidence, n_bins))
    keep = np.unique(np.linspace(0, len(targets) - 1, min(temperature_windows, len(targets))).round().astype(int))
    subset = torch.from_numpy(np.asarray(logits[keep])).reshape(-1, logits.shape[-1])
    subset_targets = targets[torch.from_numpy(keep)].reshape(-1)
    t_opt, nll_opt = optimal_temperature(subset, subset_targets)
    return {
        "ece_equal_width": expected_calibration_error(width_table),
        "ece_equal_mass": expected_calibration_error(mass_table),
        "brier": brier_sum / len(confidence),
        "mean_confidence": confidence.mean().item(),
        "nll_t1": nll_sum / len(confidence),
        "temperature_opt": t_opt,
        "nll_t_opt": nll_opt,
        "temperature_windows": int(len(keep)),
        "reliability_equal_width": width_table,
        "reliability_equal_mass": mass_table,
        "temperature_curve": {"temperature": list(TEMPERATURE_GRID),
                              "nll": [nll_at_temperature(subset, subset_targets, t) for t in TEMPERATURE_GRID]},
    }


def calibration(logits, targets: torch.Tensor) -> dict:
    """The final pass's calibration: from logits in memory, or from a file of them (a numpy memmap) in chunks."""
    if isinstance(logits, np.ndarray):
        return calibration_streamed(logits, targets)
    return calibration_from_logits(logits, targets)
