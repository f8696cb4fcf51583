"""Deterministic evaluation on the validation windows."""
from __future__ import annotations

import math

import numpy as np
import torch
from torch.nn import functional as F

from ..device import Precision
from .calibration import CalibrationStream

# The forward runs on 32 windows at a time: a full pass of the seeds-final model took 6.6 s instead of 8.5-9.2 s
# at 1 thread and 4.0 s instead of 5.2 s at 2 (128 windows' MLP activation is about the size of the L3 cache).
# The sums still run over groups of 128 windows, the grouping of every committed run: a window's logits do not
# depend on how many windows share its forward (checked bit for bit in tests/test_evaluate.py), so the totals
# stay bit-identical to theirs.
FORWARD_WINDOWS = 32
SUM_WINDOWS = 128
# The final pass keeps its logits for calibration in memory up to this many bytes; beyond it they go, chunk by chunk,
# to a CalibrationStream (calibration.py) that keeps one number per token (4,096 tokens x 392k validation tokens is
# 6.4 GB as float32; GPT-2's 50,304 x 2,400 windows of 1,024, nanoGPT's evaluation, would be 494 GB)
KEEP_IN_MEMORY_BYTES = 1 << 30
STREAM_WINDOWS = 16
# A group's logits are at most this large: fewer windows per group where the vocabulary is large (GPT-2's: 10
# windows of 1,024); every committed preset's 128 windows stay under it, so its sums keep their grouping
GROUP_BYTES = 2 << 30


@torch.inference_mode()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, precision: Precision,
             keep_logits: bool = False, forward_windows: int = FORWARD_WINDOWS,
             char_lengths: torch.Tensor | None = None) -> dict | tuple[dict, torch.Tensor | CalibrationStream]:
    """val loss (nats/token: nats/char for characters), perplexity, bits and next-token accuracy over the windows;
    with `char_lengths` (characters per token id, subword tokenizers) also the loss per character of the text the
    targets spell (`val_loss_per_char`, `val_bpc` per character, `val_chars`).

    Streams over the windows; with keep_logits the final evaluation and the calibration analysis share one forward
    pass: it also returns all logits (float32, CPU) where they fit in KEEP_IN_MEMORY_BYTES, else the
    CalibrationStream that saw them."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total_nll, correct, count, kept = 0.0, 0, 0, []
    stream = None
    vocab = _vocab_size(model)
    group = SUM_WINDOWS if not vocab else min(SUM_WINDOWS, max(1, GROUP_BYTES // (x.shape[1] * vocab * 4)))
    for i in range(0, len(x), group):
        xb, yb = x[i: i + group].to(device), y[i: i + group].to(device)
        with precision.autocast():
            parts = [model(chunk)[0] for chunk in xb.split(forward_windows)]
        logits = parts[0] if len(parts) == 1 else torch.cat(parts)
        flat = logits.float().reshape(-1, logits.shape[-1])
        if keep_logits and (stream is not None or logits.shape[-1] * y.numel() * 4 > KEEP_IN_MEMORY_BYTES):
            if stream is None:
                stream = CalibrationStream(len(x), logits.shape[1], logits.shape[-1], chunk=STREAM_WINDOWS)
            stream.add(logits, yb)
        elif keep_logits:
            kept.append(logits.float().cpu())
        total_nll += F.cross_entropy(flat, yb.reshape(-1), reduction="sum").item()
        correct += (flat.argmax(-1) == yb.reshape(-1)).sum().item()
        count += yb.numel()
    model.train(was_training)
    metrics = metrics_from_totals(total_nll, correct, count, y, char_lengths)
    if stream is not None:
        return metrics, stream
    return (metrics, torch.cat(kept)) if keep_logits else metrics


def _vocab_size(model: torch.nn.Module) -> int:
    """The model's vocabulary, through torch.compile's and DDP's wrappers (0 where none says)."""
    for m in (model, getattr(model, "_orig_mod", None), getattr(model, "module", None)):
        cfg = getattr(m, "cfg", None)
        if cfg is not None and hasattr(cfg, "vocab_size"):
            return int(cfg.vocab_size)
    return 0


def metrics_from_totals(total_nll: float, correct: int, count: int, y: torch.Tensor,
                        char_lengths: torch.Tensor | None = None) -> dict:
    """An evaluation's row from its sums (shared with the fleet's batched evaluation, fleet.py)."""
    val_loss = total_nll / count
    metrics = {
        "val_loss": val_loss,
        "val_ppl": math.exp(val_loss) if val_loss < 700 else float("inf"),
        "val_bpc": val_loss / math.log(2),
        "val_acc": correct / count,
        "val_tokens": count,
    }
    if char_lengths is not None:
        chars = int(char_lengths[y].sum())
        metrics.update({"val_loss_per_char": total_nll / chars, "val_bpc": total_nll / chars / math.log(2),
                        "val_chars": chars})
    return metrics


@torch.no_grad()
def by_position(logits, targets: torch.Tensor) -> dict[str, list[float]]:
    """Validation loss and next-token accuracy at each position 1..T of the windows (logits (N, T, V), targets
    (N, T)): how well a model predicts with 0..T-1 tokens of context (issue 17's length brittleness). A
    CalibrationStream has summed them as the logits went by; logits in a file (a numpy memmap) are read a few windows
    at a time."""
    if isinstance(logits, CalibrationStream):
        return logits.by_position()
    if isinstance(logits, np.ndarray):
        nll_sum, correct_sum = torch.zeros(targets.shape[1], dtype=torch.float64), torch.zeros(
            targets.shape[1], dtype=torch.float64)
        for i in range(0, len(targets), STREAM_WINDOWS):
            part, t = torch.from_numpy(np.asarray(logits[i: i + STREAM_WINDOWS])), targets[i: i + STREAM_WINDOWS]
            nll_sum += F.cross_entropy(part.transpose(1, 2), t, reduction="none").double().sum(0)
            correct_sum += (part.argmax(-1) == t).double().sum(0)
        n = len(targets)
        return {"val_loss": (nll_sum / n).tolist(), "val_acc": (correct_sum / n).tolist(), "windows": int(n)}
    nll = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")  # (N, T)
    correct = (logits.argmax(-1) == targets).double()
    return {"val_loss": nll.double().mean(0).tolist(), "val_acc": correct.mean(0).tolist(),
            "windows": int(targets.shape[0])}
