"""The seed study that prompted embnorm, as published: figures quoted for comparison, never computed here (report.py
sets ours beside them; answer.py reads what they say about its setup)."""

TABLE1_PRESET = "seeds-prelim"  # the preset that reproduces its Table 1 protocol (the replication study's name too)
# Table 1 of the seed study (3 seeds x 150 iterations, 8 x 128 char GPT): published figures,
# quoted for comparison; ours are computed from runs/seeds-prelim.
SEED_STUDY_TABLE1 = {
    "none": {"val_ppl": 22.18, "final_grad_norm": 0.1762, "embedding_norm": 11.46},
    "ln": {"val_ppl": 20.64, "final_grad_norm": 0.1783, "embedding_norm": 11.68},
    "rms": {"val_ppl": 21.88, "final_grad_norm": 0.1706, "embedding_norm": 11.59},
}
