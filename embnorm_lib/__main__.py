"""One command line for the whole instrument: `python -m embnorm_lib <verb> [arguments]` (or `embnorm <verb>` once
installed). Each verb is the command line of one module, run exactly as `python -m embnorm_lib.<module>` runs it,
so the old per-module commands and this one behave the same.

    python -m embnorm_lib                          # the verbs
    python -m embnorm_lib sweep <study>            # train a study's registered grid
    python -m embnorm_lib publish readme           # the README's first screen, FINDINGS.md, the figure index
    python -m embnorm_lib <verb> --help            # a verb's own options
"""
from __future__ import annotations

import runpy
import sys

# verb -> (module under embnorm_lib, what it does). The table is the whole dispatcher: a new command is one row.
VERBS = {
    "run": ("runner.run", "train one run (also torchrun's entry point)"),
    "sweep": ("runner.sweep", "train a study's grid, reusing identical finished runs; --index-only rebuilds runs.csv"),
    "publish": ("publishing.publish", "analyse a study and rewrite what quotes it (reports, README, paper)"),
    "report": ("publishing.report", "a study's per-arm table; runs/README.md"),
    "paper": ("analyses.paper", "paper/paper.pdf from the committed studies"),
    "seal": ("runner.seal_cli", "write or check the seals of finished runs"),
    "job": ("tools.job", "the README's main job: a study from a fresh clone, checked against the committed one"),
    "rescore": ("tools.rescore", "score finished runs with another zero-shot suite"),
    "bench": ("tools.bench", "where a run's time goes (runs/bench.json)"),
    "bench-gpu": ("tools.bench_gpu", "the CUDA paths timed on a GPU (runs/bench-gpu.json)"),
    "bench-fleet": ("tools.bench_fleet", "the fleet engine timed on a GPU"),
    "bench-nanogpt": ("tools.bench_nanogpt", "embnorm's model beside nanoGPT's at GPT-2 small; 124M steps on shards"),
    "throughput": ("tools.throughput", "inference throughput per arm (runs/throughput.json)"),
    "lm-eval": ("core.scoring.lm_eval_adapter", "score one run with the zero-shot suite"),
    "harness": ("core.scoring.harness", "score a shards run on lm-eval tasks by name through your tokenizer"),
    "steplog": ("core.records.steplog", "a run's per-step log back as its original JSONL"),
    "compact-logs": ("tools.compact_logs", "finished runs' per-step logs to Parquet, per run under its lock"),
    "extract-notebooks": ("runner.notebook_archive", "a study's packed executed notebooks back beside their runs"),
    "corpus": ("core.corpora.corpus", "a corpus of your own from a Hugging Face dataset"),
    "opencorpus": ("core.corpora.opencorpus", "build the open-English corpus offline"),
    "prosecorpus": ("core.corpora.prosecorpus", "build the open-prose corpus (v2, natural prose) offline"),
    "gpu-cost": ("tools.gpu_cost", "GPU-hours of the GPT-2 small presets, from runs/bench-gpu.json"),
    "lab": ("tools.lab", "JupyterLab on git-ignored copies of the notebooks (lab/): the committed ones stay clean"),
    "baselines": ("tools.baselines", "count bigram and unigram baselines of a corpus split (docs/baselines.json)"),
    "shards": ("core.corpora.shards", "a token-shard directory's layout, counts and sha256 (nanoGPT .bin, llm.c/FineWeb)"),
}


def usage() -> str:
    width = max(map(len, VERBS))
    rows = "\n".join(f"  {verb:{width}s}  {what}" for verb, (_, what) in VERBS.items())
    return f"usage: python -m embnorm_lib <verb> [arguments]\n\nverbs:\n{rows}\n"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage(), end="")
        return 0
    verb, rest = args[0], args[1:]
    if verb not in VERBS:
        print(f"error: unknown verb {verb!r}; allowed: {', '.join(VERBS)}", file=sys.stderr)
        return 2
    sys.argv = [f"embnorm_lib {verb}", *rest]
    # as `python -m embnorm_lib.<module>`: the module's own `if __name__ == "__main__"` block parses and exits
    runpy.run_module(f"embnorm_lib.{VERBS[verb][0]}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
