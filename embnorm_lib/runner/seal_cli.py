"""The `seal` verb: the seal's command line (core/records/seal.py) with the index's rule for a whole study applied by
`--check` (runner/design.py: exactly the registered cells, no link, no off-design run).

    python -m embnorm_lib seal                   # seal every finished run under runs/ that has no manifest yet
    python -m embnorm_lib seal <study> --check   # verify only: one line per damaged run or study, exit code 2"""
from __future__ import annotations

import sys

from ..core.errors import entry
from ..core.records.seal import main as seal_main
from .design import check_design


def main(argv=None) -> int:
    return seal_main(argv, study_check=check_design)


if __name__ == "__main__":
    sys.exit(entry(main))
