"""The suite does not read the user's shell: conftest.isolated_environment gives every test the same environment."""
import os

from conftest import USER_ENVIRONMENT

from embnorm_lib.core.corpora.data import CORPUS_SHA256, data_candidates, resolve_data_path


def test_a_test_sees_none_of_the_users_variables_and_finds_the_corpus_by_the_librarys_rule():
    assert not [k for k in USER_ENVIRONMENT if k in os.environ and k not in ("EMBNORM_CACHE", "MPLBACKEND")]
    assert not [k for k in os.environ if k.startswith("HF_") and not k.endswith("_OFFLINE")]
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["MPLBACKEND"] == "Agg"
    assert data_candidates()[0][0] == "cache"  # not $EMBNORM_DATA, whatever the shell exported
    import hashlib

    assert hashlib.sha256(resolve_data_path().read_bytes()).hexdigest() == CORPUS_SHA256
