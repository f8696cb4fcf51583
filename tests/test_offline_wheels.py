"""scripts/offline_wheels.py: what it pins, how it reads the target's package list, what it leaves out."""
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("offline_wheels", REPO / "scripts" / "offline_wheels.py")
ow = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ow)


def test_the_needed_packages_are_pinned_as_requirements_txt_pins_them():
    found = ow.pins(ow.NEEDED, (REPO / "requirements.txt").read_text())
    assert [p.split("==")[0] for p in found] == list(ow.NEEDED) and all("==" in p for p in found)
    with pytest.raises(SystemExit, match="pins no version of notapackage"):
        ow.pins(("notapackage",), "numpy==2.4.6\n")


def test_the_targets_list_is_read_from_freeze_output_or_a_comma_list():
    freeze = "numpy==2.1.0\nLM_Eval==0.4\n# a comment\ntyping_extensions @ file:///x\n"
    assert ow.have_names(freeze) == {"numpy", "lm-eval", "typing-extensions"}
    assert ow.have_names("absl-py, accelerate,\npyzmq") == {"absl-py", "accelerate", "pyzmq"}


def test_only_the_wheels_of_packages_already_there_are_left_out():
    wheels = ["lm_eval-0.4.13-py3-none-any.whl", "numpy-2.4.6-cp312-cp312-manylinux_2_28_x86_64.whl",
              "typing_extensions-4.15.0-py3-none-any.whl", "sqlitedict-2.1.0-py3-none-any.whl"]
    assert ow.already_there(wheels, ow.have_names("numpy, typing-extensions")) == wheels[1:3]
