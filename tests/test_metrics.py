"""observability/metrics.py: the per-step figures of the batch the trainer is about to learn from."""

import pytest

from forge_async.data.episode import ENV_TOKEN, Completion, Episode
from forge_async.observability.metrics import MetricsLog, batch_metrics

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


@pytest.mark.parametrize(
    ("whole", "warned"), [(1.2, False), (0.01, True)], ids=["small kept sets", "collapsed distribution"]
)
def test_entropy_collapse_is_judged_over_the_whole_vocabulary(tmp_path, capsys, whole, warned):
    """Over one-token kept sets the entropy is 0 by design (train/entropy); only the whole
    vocabulary's (train/entropy_whole) says whether the policy collapsed."""
    log = MetricsLog(tmp_path, total_steps=10, target_reward=0.8)
    log._warn_on_entropy_collapse({"step": 3, "train/entropy": 0.0, "train/entropy_whole": whole})
    assert ("entropy collapsed" in capsys.readouterr().out) == warned
    log.close()
