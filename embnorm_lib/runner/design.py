"""What a study is on disk (issue 117): exactly its registered cells, nothing linked in, nothing off-design.

One rule, applied by the index (results.build_index), the seal's check and publish alike, so that no command can
count a run the registry does not expect or miss one it does:

- **no link** under runs/<study>/: an arm directory, a run directory or a file that is a symbolic link is refused
  (a linked run would be counted under another arm's name, or skipped by a glob that does not follow links);
- **no extra run**: a finished run of a registered study must be one of its registered cells (an unregistered seed
  copied in and resealed would otherwise be analysed as data);
- **no off-design run**: a registered cell's run must have been trained with that cell's config, compared on the
  fields that make a run what it is (RunConfig.training_identity); a config that names no preset (written by hand)
  is held to the fields the cell fixes (variant, seed and its overrides);
- **no missing run** where the study's analysis needs them all (registry.check_registered_runs);
- **nothing training** when a study is published: a cell a sweep holds would be read half-written.

Each refusal is one line naming the run, what is wrong, and what is allowed."""
from __future__ import annotations

import os
from pathlib import Path

from ..core.config import RunConfig
from ..core.errors import ConfigError, RunDirError
from ..core.records.io import read_json, runs_root, shown_path
from ..core.records.rundir import RunDir, finished_run_dirs
from .registry import STUDIES, check_registered_runs


class DesignError(RunDirError):
    """A study's run directories are not exactly its registered design."""


def links_under(root: Path) -> list[Path]:
    """Every symbolic link under `root` (directories and files), never following one."""
    found = []
    for here, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(here) / name
            if path.is_symlink():
                found.append(path)
    return sorted(found)


def shown_link(path: Path) -> str:
    """A link's own path as shown_path shows paths: resolving the link itself would name where it points."""
    return str(Path(shown_path(path.parent)) / path.name)


def check_no_links(study: str, out_dir=None) -> None:
    root = runs_root(out_dir) / study
    if root.is_symlink():
        raise DesignError(f"study directory {shown_link(root)} is a symbolic link; allowed: a real directory")
    links = links_under(root) if root.is_dir() else []
    if links:
        raise DesignError(f"study {study}: {links[0].relative_to(root.parent).as_posix()} is a symbolic link"
                          + (f" (and {len(links) - 1} more)" if len(links) > 1 else "")
                          + "; allowed: real directories and files only (copy the run in, or retrain it)")


def _differing_field(found: dict, expected: dict) -> str | None:
    for key in sorted(set(found) | set(expected)):
        if found.get(key) != expected.get(key):
            return key
    return None


def check_cells(study: str, out_dir=None) -> None:
    """A registered study's finished runs are registered cells trained with their cells' configs."""
    if study not in STUDIES:
        return
    out = runs_root(out_dir)
    cells = {Path(c.run_dir(out)).resolve(): c for c in STUDIES[study].cells()}
    for run in finished_run_dirs(out / study):
        cell = cells.get(run.root.resolve())
        if cell is None:
            raise DesignError(f"study {study}: run {shown_path(run.root)} is not one of its {len(cells)} registered "
                              f"cells; allowed: the registered cells only (`python -m embnorm_lib sweep {study} "
                              "--list`); move an extra run to a study of its own")
        try:
            written = read_json(run.config)
            found = RunConfig.from_dict(written).training_identity()
        except (ConfigError, OSError, ValueError, TypeError) as e:
            raise DesignError(f"study {study}: run {shown_path(run.root)} has no readable config.json ({e}); "
                              "allowed: the config its training wrote") from None
        expected = cell.config().training_identity()
        if not written.get("preset"):  # a config that names no preset is held to what the cell itself fixes
            keys = {"variant", "seed", *dict(cell.overrides)}
            found, expected = ({k: v for k, v in d.items() if k in keys} for d in (found, expected))
        field = _differing_field(found, expected)
        if field is not None:
            raise DesignError(f"study {study}: run {shown_path(run.root)} was trained with {field}="
                              f"{found.get(field)!r} but its registered cell has {field}={expected.get(field)!r}; "
                              "allowed: the registered config (retrain the cell, or move the run to a study of its "
                              "own)")


def check_nothing_training(study: str, out_dir=None) -> None:
    root = runs_root(out_dir) / study
    if not root.is_dir():
        return
    for lock_name in (".cell.lock", ".lock"):
        for path in sorted(root.glob(f"*/*/{lock_name}")):
            run = RunDir(path.parent)
            lock = run.cell_lock(leave_no_file=True) if lock_name == ".cell.lock" else run.training_lock(
                leave_no_file=True)
            if lock.held_elsewhere():
                raise DesignError(f"study {study}: run {shown_path(run.root)} is being trained by another process "
                                  f"({lock_name} held); allowed: publishing once no sweep holds the study's cells")


def check_design(study: str, out_dir=None, publishing: bool = False) -> None:
    """The one rule (module docstring). Indexing a study in progress skips only the missing-run and training
    checks; publishing applies them all."""
    check_no_links(study, out_dir)
    check_cells(study, out_dir)
    if publishing:
        check_nothing_training(study, out_dir)
        check_registered_runs(study, out_dir)


def check_run_path(run_dir: Path) -> None:
    """The study, arm and run directories of a run about to be written, and the run's files: none a symbolic link, in
    any study. After `tar -x` of a crafted archive, a later run wrote its whole run directory outside the tree."""
    run_dir = Path(run_dir)
    link = next((p for p in (run_dir.parent.parent, run_dir.parent, run_dir) if p.is_symlink()), None)
    if link is None and run_dir.is_dir():
        link = next(iter(links_under(run_dir)), None)
    if link is not None:
        raise DesignError(f"{shown_link(link)} is a symbolic link; allowed: real directories and files under the runs "
                          "directory (a run writes through no link)")


def check_registered_cell(study: str, cfg: RunConfig, run_dir: Path, out_dir=None) -> None:
    """A single run (`run`, the training notebook) is written through no link; into a registered study it must be one
    of its cells, with that cell's config: otherwise the study's index would count an off-design run."""
    check_run_path(run_dir)
    if study not in STUDIES:
        return
    out = runs_root(out_dir)
    cell = next((c for c in STUDIES[study].cells() if Path(c.run_dir(out)).resolve() == Path(run_dir).resolve()), None)
    if cell is None:
        raise DesignError(f"invalid study={study!r} for {shown_path(run_dir)}: not one of the registered study's "
                          f"cells; allowed: one of its cells (`python -m embnorm_lib sweep {study} --list`), or a "
                          "study name of your own (e.g. --study adhoc)")
    field = _differing_field(cfg.training_identity(), cell.config().training_identity())
    if field is not None:
        raise DesignError(f"invalid {field}={getattr(cfg, field)!r} for registered study {study}'s cell "
                          f"{cell.label()}; allowed: {field}={getattr(cell.config(), field)!r} as registered, or a "
                          "study name of your own (e.g. --study adhoc)")
