"""Deterministic evaluation on the whole validation split."""
from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from .device import Precision


@torch.inference_mode()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, precision: Precision,
             batch_windows: int = 128, keep_logits: bool = False) -> dict | tuple[dict, torch.Tensor]:
    """val loss (nats/char), perplexity, bits/char and next-char accuracy over all windows.

    Streams over the windows; with keep_logits it also returns all logits (float32, CPU) so the
    final evaluation and the calibration analysis share one forward pass."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total_nll, correct, count, kept = 0.0, 0, 0, []
    for i in range(0, len(x), batch_windows):
        xb, yb = x[i: i + batch_windows].to(device), y[i: i + batch_windows].to(device)
        with precision.autocast():
            logits, _, _ = model(xb)
        flat = logits.float().reshape(-1, logits.shape[-1])
        if keep_logits:
            kept.append(logits.float().cpu())
        total_nll += F.cross_entropy(flat, yb.reshape(-1), reduction="sum").item()
        correct += (flat.argmax(-1) == yb.reshape(-1)).sum().item()
        count += yb.numel()
    model.train(was_training)
    val_loss = total_nll / count
    metrics = {
        "val_loss": val_loss,
        "val_ppl": math.exp(val_loss) if val_loss < 700 else float("inf"),
        "val_bpc": val_loss / math.log(2),
        "val_acc": correct / count,
        "val_tokens": count,
    }
    return (metrics, torch.cat(kept)) if keep_logits else metrics
