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


TEMPERATURE_BYTES = 1 << 30  # the most logits kept for the temperature fit (4 windows of GPT-2's 50,304 x 1,024)


class CalibrationStream:
    """The final pass's calibration and loss by position, accumulated chunk by chunk as the evaluation produces the
    logits (issue 115): no copy of all logits in memory or on disk. Kept: the top-label confidence and hit of every
    token (one number each, for the ECE bins), float64 sums of the Brier score, the NLL and the loss and accuracy per
    position, and the logits of the windows temperature scaling (not an endpoint) is fitted on: `temperature_windows`
    evenly spaced windows, fewer where their logits would exceed TEMPERATURE_BYTES. Chunks of `chunk` windows, in the
    order and grouping a file of the logits was read in before (the numbers are those, bit for bit on CPU)."""

    def __init__(self, n_windows: int, window_len: int, vocab: int, temperature_windows: int = 256,
                 chunk: int = 16, n_bins: int = N_BINS):
        fit = max(1, TEMPERATURE_BYTES // (window_len * vocab * 4))
        self.keep = np.unique(np.linspace(0, n_windows - 1, min(temperature_windows, n_windows, fit)).round()
                              .astype(int))
        self.n_windows, self.chunk, self.n_bins, self.seen = n_windows, chunk, n_bins, 0
        self.confidences, self.hits, self.kept, self.kept_targets = [], [], [], []
        self.brier_sum = self.nll_sum = 0.0
        self.position_nll = torch.zeros(window_len, dtype=torch.float64)
        self.position_correct = torch.zeros(window_len, dtype=torch.float64)

    def add(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        """The next windows' logits (N, T, V) and targets (N, T), in window order."""
        for j in range(0, len(logits), self.chunk):
            part3, t2 = logits[j: j + self.chunk].float(), targets[j: j + self.chunk].to(logits.device)
            part, t = part3.reshape(-1, part3.shape[-1]), t2.reshape(-1)
            probs = part.softmax(-1)
            confidence, prediction = probs.max(-1)
            self.confidences.append(confidence.cpu())
            self.hits.append((prediction == t).cpu())
            p = probs.double() / probs.double().sum(-1, keepdim=True)
            self.brier_sum += float((p.pow(2).sum(-1) - 2 * p.gather(1, t[:, None]).squeeze(1) + 1).sum())
            self.nll_sum += F.cross_entropy(part, t, reduction="sum").item()
            self.position_nll += F.cross_entropy(part3.transpose(1, 2), t2, reduction="none").double().sum(0).cpu()
            self.position_correct += (part3.argmax(-1) == t2).double().sum(0).cpu()
            index = np.arange(self.seen, self.seen + len(part3))
            wanted = np.isin(index, self.keep)
            if wanted.any():
                rows = torch.from_numpy(np.flatnonzero(wanted)).to(part3.device)
                self.kept.append(part3[rows].cpu())
                self.kept_targets.append(t2[rows].cpu())
            self.seen += len(part3)

    def calibration(self) -> dict:
        confidence, correct = torch.cat(self.confidences), torch.cat(self.hits)
        width_table = reliability_table(confidence, correct, equal_width_edges(confidence, self.n_bins))
        mass_table = reliability_table(confidence, correct, equal_mass_edges(confidence, self.n_bins))
        subset = torch.cat(self.kept).reshape(-1, self.kept[0].shape[-1])
        subset_targets = torch.cat(self.kept_targets).reshape(-1)
        t_opt, nll_opt = optimal_temperature(subset, subset_targets)
        return {
            "ece_equal_width": expected_calibration_error(width_table),
            "ece_equal_mass": expected_calibration_error(mass_table),
            "brier": self.brier_sum / len(confidence),
            "mean_confidence": confidence.mean().item(),
            "nll_t1": self.nll_sum / len(confidence),
            "temperature_opt": t_opt,
            "nll_t_opt": nll_opt,
            "temperature_windows": int(len(self.keep)),
            "reliability_equal_width": width_table,
            "reliability_equal_mass": mass_table,
            "temperature_curve": {"temperature": list(TEMPERATURE_GRID),
                                  "nll": [nll_at_temperature(subset, subset_targets, t) for t in TEMPERATURE_GRID]},
        }

    def by_position(self) -> dict[str, list[float]]:
        n = self.seen
        return {"val_loss": (self.position_nll / n).tolist(), "val_acc": (self.position_correct / n).tolist(),
                "windows": int(n)}


def calibration_streamed(logits: np.ndarray, targets: torch.Tensor, n_bins: int = N_BINS, windows: int = 16,
                         temperature_windows: int = 256) -> dict:
    """calibration_from_logits for logits kept in a file (a numpy memmap of windows x T x V), read `windows` windows
    at a time through a CalibrationStream: the ECEs, Brier score, mean confidence and NLL over every token, never more
    than a chunk of probabilities in memory (the equal-width ECE comes from the binning that tests hold equal to
    torchmetrics'; the Brier and NLL sums accumulate in float64). Temperature scaling is fitted on
    `temperature_windows` evenly spaced windows: fitted on all of them it took ~50 passes over 6.4 GB."""
    targets = targets.reshape(len(targets), -1)
    stream = CalibrationStream(len(targets), targets.shape[1], logits.shape[-1], temperature_windows, windows, n_bins)
    for i in range(0, len(targets), windows):
        stream.add(torch.from_numpy(np.asarray(logits[i: i + windows])), targets[i: i + windows])
    return stream.calibration()


def calibration(logits, targets: torch.Tensor) -> dict:
    """The final pass's calibration: from logits in memory, from a stream that saw them (CalibrationStream), or
    from a file of them (a numpy memmap) in chunks."""
    if isinstance(logits, CalibrationStream):
        return logits.calibration()
    if isinstance(logits, np.ndarray):
        return calibration_streamed(logits, targets)
    return calibration_from_logits(logits, targets)
