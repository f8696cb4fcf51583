"""The questions FINDINGS.md is grouped by: report.py writes the page, answer.py links the README's first screen
to its sections."""

# The findings page's groups, in order: (title, what the group measures, in one sentence). The sentence that opens a
# group is this plus, where the group's own results decide it, a computed reading (`_group_reading`).
FINDINGS_GROUPS = {
    "accuracy": ("Accuracy: does an embedding norm change validation loss?",
                 "Final validation loss in nats per character (lower is better); a positive difference from `none` "
                 "is a cost of the norm."),
    "calibration": ("Calibration: are the predicted probabilities as trustworthy?",
                    "Top-label ECE and Brier score of next-character predictions (lower is better), secondary "
                    "endpoints of the registered family."),
    "zero-shot": ("Zero-shot: does it change what the model can do on tasks it was not trained for?",
                  "Accuracy on multiple-choice Shakespeare tasks scored without training; suite v2 is the registered "
                  "endpoint (docs/PROTOCOL.md amendment 3) and suite v1 is superseded."),
    "stability": ("Stability: does an embedding norm let training survive a higher learning rate?",
                  "Failures (non-finite loss, or a final loss above the loss at init) and loss spikes across peak "
                  "learning rates, depth, clipping and precision."),
    "scale": ("Scale: does the answer change with model size?",
              "Each norm's difference from `none` at each size of the ladder, and the trend across sizes "
              "(exploratory; on 1 MB of text the larger rungs are data-bound, issue 76)."),
    "mechanism": ("Mechanism: why does the norm help or hurt?",
                  "Which half of LayerNorm (normalizing, or rescaling what enters block 1) carries its effect, and "
                  "how the embedding's init scale decides its sign."),
}
