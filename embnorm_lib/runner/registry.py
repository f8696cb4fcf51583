"""The registry's types: a study is data (a grid of cells, what it asks, how it was registered, which analysis reads
it), an analysis kind is a plugin that publishes a study of that kind. The engine names no study and no kind of its
own: the study layer registers into the two maps below (studies/ its entries, analyses/ its plugins), and the engine
looks them up by name, as lm-evaluation-harness's evaluator looks up tasks.

A study's grid is variants x seeds x any further axes of config overrides, one `Cell` per run: the sweep runs it,
the index and reports describe it, and its `analysis` kind says which plugin publishes it."""
from __future__ import annotations

import importlib
import itertools
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.config import RunConfig, check_name
from ..core.errors import ConfigError, RunDirError
from ..core.nets.variants import canonical_variant, variant_names
from ..core.notebook import config_from_parameters
from ..core.records.io import runs_root
from ..core.records.rundir import RunDir, run_dir_for


@dataclass(frozen=True)
class Cell:
    """One run of a study: a preset, a variant, a seed, and any further config overrides."""

    study: str
    preset: str
    variant: str
    seed: int
    overrides: tuple[tuple[str, Any], ...] = ()
    tag_axes: tuple[str, ...] = ()  # which overrides name the run directory

    @property
    def tag(self) -> str:
        values = dict(self.overrides)
        return "".join(f"_{k}={values[k] if k != 'preset' else self.preset}" for k in self.tag_axes)

    def config(self) -> RunConfig:
        return config_from_parameters(self.preset, self.variant, self.seed, overrides=dict(self.overrides))

    def run_dir(self, out_dir: Path) -> Path:
        return run_dir_for(self.study, self.variant, self.seed, out_dir, tag=self.tag)

    def label(self) -> str:
        return f"{self.variant}{self.tag} seed{self.seed}"


def _check_grid(fixed: dict | None, axes: dict | None, seeds: list) -> None:
    for kind, given in (("overrides", fixed), ("axes", axes)):
        if given is not None and not isinstance(given, dict):
            raise ConfigError(f"invalid {kind}={given!r}; allowed: a mapping of config fields")
        reserved = sorted(set(given or {}) & {"variant", "seed"})
        if reserved:
            raise ConfigError(f"invalid {kind} key(s) {', '.join(reserved)}; allowed: any other config field "
                              f"(variants and seeds are axes of their own)")
    bad = [s for s in seeds if not (isinstance(s, int) and not isinstance(s, bool) and s >= 0)]
    if bad:
        raise ConfigError(f"invalid seeds {bad!r}; allowed: integers >= 0")


def grid(study: str, preset: str, variants: Iterable[str], seeds: Iterable[int],
         fixed: dict[str, Any] | None = None, axes: dict[str, list] | None = None,
         tag_preset: bool = False) -> list[Cell]:
    """variants x seeds x every combination of `axes`; `fixed` overrides apply to all cells."""
    check_name("study", study)
    seeds = list(seeds)
    _check_grid(fixed, axes, seeds)
    axes = axes or {}
    names = list(axes)
    cells = []
    for values in itertools.product(*(axes[n] for n in names)) if names else [()]:
        overrides = {**(fixed or {}), **dict(zip(names, values, strict=True))}
        tag_axes = (("preset",) if tag_preset else ()) + tuple(names)
        for variant in variants:
            for seed in seeds:
                cells.append(Cell(study, preset, canonical_variant(variant), seed,
                                  tuple(sorted(overrides.items())), tag_axes))
    return cells


def seed_major(study: str, preset: str, variants, seeds, fixed: dict, axes: dict) -> list[Cell]:
    """`grid` one seed after another: a sweep stopped part-way has covered the whole grid for the first seeds."""
    return [cell for seed in seeds for cell in grid(study, preset, variants, [seed], fixed=fixed, axes=axes)]


# what a study's runs can decide: confirmatory (a registered test and decision rule), exploratory (a description or a
# search; decides nothing registered), tuning (picks a setting a confirmatory study runs at), smoke (the pipeline)
STATUSES = ("confirmatory", "exploratory", "tuning", "smoke")
ABC = ("none", "ln", "rms")  # the arms A, B, C, by name: a variant registered later changes no study
ABCD = (*ABC, "scaled")  # ... and D, the scaled embedding (stability studies)
if not set(ABCD) <= set(variant_names()):
    raise ImportError(f"the study arms {ABCD} must be registered variants; registered: {variant_names()}")
WITH_LM_EVAL = {"lm_eval": True}  # studies whose registered family includes lm_macro_acc score every run
# The evaluation plan of studies registered from now on: the learning curve on 64 evenly spaced validation windows
# (8,192 characters; for the 8 x 128 model at 300 iterations the subset's mean loss has a standard error of ~0.015
# nats/char around the whole split's, paired across arms since the windows are fixed), the final metrics on every
# window. Studies registered before scored every window each time and keep that plan (part of their runs' identity).
INTERIM_EVAL = {"interim_eval_windows": 64}


@dataclass(frozen=True)
class Study:
    name: str
    description: str  # one paragraph for runs/README.md
    analysis: str  # the kind of analysis (a plugin of ANALYSES) that publishes it
    cells: Callable[[], list[Cell]]
    note: str = ""  # what a reader of its report must know about the design (REPORT.md prints it)
    shared_seeds: dict[str, str] = field(default_factory=dict)  # scope -> which runs it shares with another study
    # why a registered cell cannot run yet ("" when it can): the sweep lists such a cell and trains none of them
    waits_for: Callable[[Cell], str] = lambda cell: ""
    question: str = ""  # what the study asks, in one sentence without numbers (its report opens with it)
    # how docs/PROTOCOL.md registers it (STATUSES) and by which amendment (0: the protocol as first registered);
    # every report's header (publishing/study_header.py) states both, with the amendment's heading
    status: str = "exploratory"
    amendment: int = 0
    # the README's headline studies: their zero-shot and paired findings lead, and publishing one rewrites the pages
    headline: bool = False
    default: bool = False  # the study a command runs when given none (the README's main job)
    readme_extra: Callable | None = None  # (runs) -> lines that runs/README.md adds under the study's table
    # the whole registered design's run count, for a study whose cells register in stages (a ladder's sizes as their
    # LRs are tuned): pages say "k of N" against it, so N moves only with a registered change (None: len(cells()))
    design_runs: Callable[[], int] | None = None


@dataclass(frozen=True)
class Analysis:
    """A kind of analysis: how a study of that kind is published and listed. Its functions are the plugin's own
    objects; a plugin whose module is costly to import (matplotlib, the paper) registers a small function that
    imports it when called, so looking a kind up stays cheap."""

    kind: str
    publish: Callable  # (study, out, figures_dir) -> {name: path}: the study's index, report(s) and their extras
    partial: bool = False  # its report counts finished runs, so a study still training may be published
    # publishing one of its studies rewrites the README's pages always, or only for a headline study (the pages
    # quote no other study of the kind)
    headline_only: bool = False
    section: str = ""  # which section of runs/README.md lists its studies (SITE.sections)
    group: str = ""  # a publish target that names all of its studies together ("" for none)
    publish_group: Callable | None = None  # (out, figures_dir) -> {name: path}: that target's publication


@dataclass(frozen=True)
class Section:
    """A section of runs/README.md: its heading and opening lines, and how each of its studies is listed."""

    key: str
    entry: Callable  # (study, out, section) -> markdown lines of one study
    heading: tuple[str, ...] = ()  # lines before its first study (none: each study brings its own heading)
    links: tuple[str, ...] = ()  # the report files an entry links where a study has them, in this order


@dataclass(frozen=True)
class Site:
    """What the study layer publishes beyond each study's reports: the pages quoting them all, and the paper."""

    sections: tuple[Section, ...]
    readme: Callable  # (out_dir) -> [paths]: the README's first screen, FINDINGS.md, the figure index
    findings: Callable  # (out_dir, studies) -> markdown: the findings of the given studies
    paper: Callable  # (out_dir) -> path: paper/paper.pdf
    default_kind: str  # the analysis of a study outside the registry (a grid given on the command line)


class Registry(MutableMapping):
    """name -> entry, filled by the module or package of the study layer that registers into it (`package`, under
    embnorm_lib), which is imported the first time the registry is read: the engine never imports the study layer,
    and a command that reads the registry always sees every entry."""

    def __init__(self, package: str, what: str) -> None:
        self.package, self.what = package, what
        self._entries: dict[str, Any] = {}
        self._loaded = False

    def register(self, *entries: Any) -> None:
        for entry in entries:
            name = getattr(entry, "name", None) or entry.kind
            if name in self._entries:
                raise ValueError(f"{self.what} {name!r} is registered twice; allowed: one entry per name")
            self._entries[name] = entry

    def _load(self) -> dict[str, Any]:
        if not self._loaded:
            self._loaded = True  # set first: the package reads the registry while it fills it
            try:
                importlib.import_module(f"{__package__.rsplit('.', 1)[0]}.{self.package}")
            except BaseException:
                self._loaded = False
                raise
        return self._entries

    def __getitem__(self, name: str) -> Any:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __setitem__(self, name: str, entry: Any) -> None:  # a test's own entry (monkeypatch.setitem)
        self._load()[name] = entry

    def __delitem__(self, name: str) -> None:
        del self._load()[name]


STUDIES = Registry("studies", "study")
ANALYSES = Registry("analyses.plugins", "analysis kind")
_SITE: list[Site] = []


def register_site(site: Site) -> None:
    _SITE[:] = [site]


def site() -> Site:
    ANALYSES._load()  # analyses/plugins.py registers the site with its plugins
    return _SITE[0]


def study_cells(name: str) -> list[Cell]:
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; allowed: {', '.join(STUDIES)} (or give --preset for a grid)")
    return STUDIES[name].cells()


def planned_runs(name: str) -> int:
    """How many runs a page says a study will have: its whole design where it registers in stages, else its cells."""
    study = STUDIES[name] if name in STUDIES else None
    return study.design_runs() if study is not None and study.design_runs is not None else len(study_cells(name))


def registered_seeds(name: str) -> int:
    """How many seeds a study registers per cell: a size of a ladder is finished, and quoted, with all of them."""
    return len({c.seed for c in study_cells(name)})


def studies_of(analysis: str) -> list[str]:
    """The registered studies analysed one way, in registry order."""
    return [s.name for s in STUDIES.values() if s.analysis == analysis]


def headline_studies() -> tuple[str, ...]:
    """The README's headline studies, in registry order (the smaller first)."""
    return tuple(s.name for s in STUDIES.values() if s.headline)


def default_study() -> str:
    return next(s.name for s in STUDIES.values() if s.default)


def waits_for(cell: Cell) -> str:
    """Why a cell of a registered study cannot run yet, or "" (an ad-hoc study's cells never wait)."""
    study = STUDIES.get(cell.study)
    return study.waits_for(cell) if study else ""


def analysis_of(study: str) -> Analysis:
    """The plugin that publishes a study (the site's default kind for a study outside the registry)."""
    return ANALYSES[STUDIES[study].analysis if study in STUDIES else site().default_kind]


def write_own_report(study: str, out_dir=None, figures_dir=None) -> Path:
    """A report module's own command line: the study's pages written by its kind's plugin, as `publish` writes them
    (the answer its header quotes included), without the pages that quote it; the report's path (the plugin's first)."""
    written = analysis_of(study).publish(study, runs_root(out_dir), Path(figures_dir) if figures_dir else None)
    return next(iter(written.values()))


class MissingRunsError(RunDirError):
    """A registered run of a study that must be complete is missing or unfinished."""


def unfinished_runs(name: str, out_dir: Path | None = None) -> list[Path]:
    """The run directories the registry expects of a study (its grid x seeds) that hold no finished run; [] for a
    study outside the registry."""
    if name not in STUDIES:
        return []
    return [d for d in (c.run_dir(runs_root(out_dir)) for c in STUDIES[name].cells())
            if not RunDir(d).summary.is_file()]


def check_registered_runs(name: str, out_dir: Path | None = None) -> None:
    """Before a study is analysed: the runs it must have come from the registry, not from what is on disk, so a
    missing run is refused in one line and a smaller n is never analysed. A study whose report counts its finished
    runs (a partial analysis kind) may be partial."""
    if name not in STUDIES or ANALYSES[STUDIES[name].analysis].partial:
        return
    missing = unfinished_runs(name, out_dir)
    if missing:
        root = runs_root(out_dir) / name
        shown = ", ".join(str(d.relative_to(root)) for d in missing[:4]) + (", ..." if len(missing) > 4 else "")
        raise MissingRunsError(f"study {name}: {len(missing)} of {len(STUDIES[name].cells())} registered runs are "
                               f"missing or unfinished ({shown}); allowed: every registered run finished (`python -m "
                               f"embnorm_lib.runner.sweep {name}` trains what is missing)")
