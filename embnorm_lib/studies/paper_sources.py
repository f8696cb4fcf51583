"""The studies the paper quotes, by the role each plays in it (analyses/paper.py reads them from here: the engine and
the analyses name no study). A study quoted in a new role is one line here."""
from __future__ import annotations

MAIN = "main"  # the registered regimes' runs
FINAL = "seeds-final"  # the seed study's final plan (its seeds 0-4 are MAIN's first regime's)
REGIMES = ("seeds-final", "nanogpt-cpu")  # its two regimes (presets), each analysed as a scope of MAIN
PRELIM = "seeds-prelim"  # the small study's protocol, replicated
SCALE = "stability-scale-v2"  # the scale-versus-normalization grid
H1B = "stability-h1b-v2"  # the registered stability test
LADDER = "ladder"  # the 1 MB character ladder (and the data.json section that carries every ladder)
LADDER_LR = "ladder-lr"  # its learning-rate check
LADDER_BPE = "ladder-bpe"  # the subword ladder on the same megabyte
BPE_LR, BPE_LR2 = "ladder-bpe-lr", "ladder-bpe-lr2"  # its learning-rate checks on subwords at rung 1 and rung 2
BPE_REP = "ladder-bpe-rep"  # its registered replication at rung 1 (amendment 9)
BPE_REP2 = "ladder-bpe-rep2"  # ... and at rung 2 (amendment 11)
BPE_SCALE = "ladder-bpe-scale"  # what carries the subword gain (amendment 10, exploratory)
LADDER_DATA = "ladder-data"  # the open-English ladder (amendment 16)
LADDER_DATA_LR = "ladder-data-lr"  # its learning-rate tuning
# the studies whose training recipe the paper's recipe table shows, each under the words the paper calls it by
RECIPE_ROWS = {MAIN: "registered regimes", LADDER_DATA: "open-English ladder", H1B: "registered stability test",
               SCALE: "scale vs normalization"}
BOUNDARY_KEYS: dict[str, str] = {  # the learning-rate searches, by their key in the paper's data
    "clip": "stability-lr-v2", "noclip": "stability-noclip-v2", "deep": "stability-deep-v2",
    "deep32": "stability-deep32-v2", "bf16": "stability-bf16-v2"}


# -- what each claim's registration was (issue 72) -----------------------------------------------------------------
# Per claim of the paper: its status, the studies whose runs are its data (the first listed is where the data first
# existed), and the commit of docs/PROTOCOL.md that registered it. "before": registered before any of its runs was
# trained; "after": registered, but after (some of) its data existed; "exploratory": never registered as confirmatory.
# tests/test_paper.py checks each "before"/"after" against git ancestry of the runs' recorded commits.
REGISTRATION = (
    {"claim": "budget", "status": "exploratory", "studies": ["stability-budget", "stability-budget-v2"],
     "registered_by": None, "where": "never registered: amendment 1 made these early studies exploratory"},
    {"claim": "main_short", "status": "after", "studies": ["seeds-final", "main"], "registered_by": "7948277d",
     "where": "the protocol, after its first 5 seeds were trained"},
    {"claim": "main_long", "status": "before", "studies": ["main"], "registered_by": "7948277d",
     "where": "the protocol (its interval method amended later, by amendment 1)"},
    {"claim": "seed_study", "status": "after", "studies": ["seeds-prelim"], "registered_by": "7948277d",
     "where": "the protocol, written after these runs and their results"},
    {"claim": "scale", "status": "exploratory", "studies": ["stability-scale-v2"], "registered_by": None,
     "where": "never registered"},
    {"claim": "search", "status": "exploratory", "studies": ["stability-lr-v2", "stability-noclip-v2",
                                                             "stability-deep-v2"],
     "registered_by": None, "where": "never registered: amendment 1 made the search exploratory"},
    {"claim": "h1b", "status": "before", "studies": ["stability-h1b-v2"], "registered_by": "7a467f82",
     "where": "amendment 2"},
    {"claim": "zeroshot_v1", "status": "before", "studies": ["main"], "registered_by": "7948277d",
     "where": "the protocol, as a secondary metric; replaced by amendment 3's suite"},
    {"claim": "zeroshot_v2", "status": "before", "studies": ["main"], "registered_by": "89d30598",
     "where": "amendment 3, after the runs were trained and before any was scored"},
    {"claim": "ladder", "status": "before", "studies": ["ladder"], "registered_by": "04f27a2f",
     "where": "amendment 4, for each size (the trend across sizes is exploratory)"},
    {"claim": "ladder_data", "status": "before", "studies": ["ladder-data"], "registered_by": "65fca37c",
     "where": "amendment 16, for each size; seeds 5–9 added by its pre-stated power rule (the trend is exploratory)"},
    {"claim": "bpe_ladder", "status": "after", "studies": ["ladder-bpe"], "registered_by": "53957780",
     "where": "amendment 7, written while its second size trained, before any analysis"},
    {"claim": "bpe_rep", "status": "before", "studies": ["ladder-bpe-rep"], "registered_by": "2ed72d0e",
     "where": "amendment 9"},
    {"claim": "bpe_rep2", "status": "before", "studies": ["ladder-bpe-rep2"], "registered_by": "f2b9dffa",
     "where": "amendment 11"},
    {"claim": "bpe_scale", "status": "exploratory", "studies": ["ladder-bpe-scale"], "registered_by": None,
     "where": "never registered: amendment 10 named it exploratory"},
)
