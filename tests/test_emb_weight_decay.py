"""emb_weight_decay: the token and position tables' own AdamW decay (amendment 21's question), None by default: the
matrices' weight_decay, which is what every committed run trained with."""
import pytest
import torch
from conftest import tiny

from embnorm_lib.core.errors import ConfigError
from embnorm_lib.core.nets.model import GPT
from embnorm_lib.core.records.steplog import read_step_log
from embnorm_lib.core.training.fleet_ops import check_fleet_configs, fleet_configs
from embnorm_lib.core.training.optimizer import make_optimizer
from embnorm_lib.core.training.train import train

CPU = torch.device("cpu")


def _decay_of(model, optimizer) -> dict[str, float]:
    by_id = {id(p): g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
    return {name: by_id[id(p)] for name, p in model.named_parameters()}


@pytest.mark.parametrize("tie", [True, False])
def test_the_tables_take_their_own_decay_and_everything_else_keeps_its_own(tie):
    cfg = tiny(emb_weight_decay=0.0, tie_embeddings=tie)
    model = GPT(cfg)
    decay = _decay_of(model, make_optimizer(model, cfg, CPU))
    assert decay["wte.weight"] == decay["wpe.weight"] == 0.0  # a tied head is wte.weight: it follows the table
    assert decay["blocks.0.attn.c_attn.weight"] == cfg.weight_decay == 0.1
    assert decay.get("lm_head.weight", 0.1) == 0.1 and decay["blocks.0.ln_1.weight"] == 0.0
    default = GPT(tiny(tie_embeddings=tie))
    groups = make_optimizer(default, tiny(tie_embeddings=tie), CPU).param_groups
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]  # the committed runs' two groups, untouched


def test_the_default_and_an_equal_value_train_bitwise_what_the_committed_runs_trained_and_zero_does_not(tmp_path,
                                                                                                    data_path):
    losses = {}
    for name, value in (("default", None), ("equal", 0.1), ("zero", 0.0)):
        cfg = tiny(max_iters=12, emb_weight_decay=value, torch_threads=1, eval_interval=12, lr=3e-3)
        train(cfg, tmp_path / name, data_path, progress=False)
        losses[name] = [r["train_loss"] for r in read_step_log(tmp_path / name, "metrics")]
    assert losses["default"] == losses["equal"] and losses["zero"] != losses["default"]


@pytest.mark.parametrize("value", [-0.1, "0", True, float("nan")])
def test_a_bad_value_is_refused_in_one_line(value):
    with pytest.raises(ConfigError, match=r"invalid emb_weight_decay=.*allowed: null \(weight_decay's value\) or a number >= 0"):
        tiny(emb_weight_decay=value)


def test_the_fleet_refuses_a_decay_it_would_not_apply():
    check_fleet_configs(fleet_configs([tiny(emb_weight_decay=0.1)]))  # equal to weight_decay: one slice still
    with pytest.raises(ConfigError, match="invalid emb_weight_decay=0.0 in a fleet; allowed: null or weight_decay's"):
        check_fleet_configs(fleet_configs([tiny(emb_weight_decay=0.0)]))
