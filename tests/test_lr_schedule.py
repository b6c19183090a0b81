"""The trainer's learning-rate schedule: TorchTitan's warmup-stable-decay, as the config sets it."""

import pytest
import torch

from forge_async.learning.learner import _lr_scheduler
from forge_async.learning.config import TrainerConfig
from forge_async.errors import ConfigError

pytestmark = pytest.mark.unit


def lrs(config: TrainerConfig, steps: int) -> list[float]:
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=config.lr)
    scheduler = _lr_scheduler(optimizer, config)
    seen = []
    for _ in range(steps):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return seen


def test_decay_ratio_keeps_the_full_lr_until_the_last_part_of_the_run():
    """The CPU default's schedule (configs/grpo.yaml): full lr for the first half, then a linear
    decay towards lr/10."""
    config = TrainerConfig(lr_schedule="linear", decay_ratio=0.5, min_lr_factor=0.1, lr_total_steps=20)
    lr = lrs(config, 20)
    assert lr[:10] == [1e-3] * 10, lr
    assert all(a > b for a, b in zip(lr[10:], lr[11:])), lr
    assert 1e-4 <= lr[-1] < 2e-4, lr
    # Without a ratio the decay starts at once (after TorchTitan's one step at full lr).
    immediate = lrs(TrainerConfig(lr_schedule="linear", decay_ratio=None, min_lr_factor=0.1, lr_total_steps=20), 20)
    assert immediate[0] == 1e-3 and immediate[2] < 1e-3 and immediate[-1] < 2e-4
    # A constant schedule ignores the ratio.
    assert lrs(TrainerConfig(lr_schedule="constant", decay_ratio=0.5, lr_total_steps=20), 20) == [1e-3] * 20


def test_a_decay_ratio_outside_0_1_names_the_key():
    with pytest.raises(ConfigError, match="trainer.decay_ratio=1.5"):
        TrainerConfig(decay_ratio=1.5)
