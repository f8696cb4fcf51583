"""The network: the GPT (model.py) and the one thing the study varies, the embedding variants (variants.py)."""
