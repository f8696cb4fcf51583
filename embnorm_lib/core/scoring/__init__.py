"""What a trained model is measured by: validation passes, calibration, diagnostics, and the zero/few-shot stage
(lm-eval suites, harness tasks by name, a fleet's shared scoring)."""
