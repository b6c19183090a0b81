"""observability/metrics.py: the per-step figures of the batch the trainer is about to learn from."""

import pytest

from forge_async.data.episode import ENV_TOKEN, Completion, Episode
from forge_async.observability.metrics import batch_metrics

pytestmark = pytest.mark.unit


def episode(versions: list[int]) -> Episode:
    n = len(versions)
    logprobs = [0.0 if v == ENV_TOKEN else -1.0 for v in versions]
    return Episode(Completion([1], [7] * n, logprobs, versions, "", "done"), reward=1.0, advantage=0.0)


def test_completion_lengths_count_the_model_s_tokens_and_the_environment_s_apart():
    # Multi-turn: 2 model tokens, 5 of the environment's, 1 more of the model; and a single turn of 3.
    batch = [episode([0, 0] + [ENV_TOKEN] * 5 + [0]), episode([0, 0, 0])]
    figures = batch_metrics(batch, trainer_version=0)
    assert figures["completion/length_mean"] == 3.0 and figures["completion/length_max"] == 3
    assert figures["completion/env_tokens_mean"] == 2.5


def test_single_turn_batches_report_no_environment_tokens():
    figures = batch_metrics([episode([0, 0]), episode([0])], trainer_version=0)
    assert figures["completion/length_mean"] == 1.5 and figures["completion/length_max"] == 2
    assert "completion/env_tokens_mean" not in figures
