"""One optimizer step on fixed episodes in a fresh trainer mesh, and the check that two such steps agree."""

import asyncio

from forge_async.data.episode import Completion, Episode
from forge_async.handles import meshes
from tests.support.digits import fixed_sequences
from tests.support.meshes import spawn_trainer


def batch() -> list[Episode]:
    """Fixed episodes with varied lengths and advantages (no generator needed)."""
    episodes = []
    for i, seq in enumerate(fixed_sequences() * 2):
        prompt, response = seq[:5], seq[5:]
        completion = Completion(
            prompt_ids=prompt,
            token_ids=response,
            logprobs=[-2.0] * len(response),
            versions=[0] * len(response),
            text="",
            finish_reason="stop",
        )
        episodes.append(Episode(completion, reward=0.0, advantage=(i % 3) - 1.0))
    return episodes


def step(checkpoint, procs: int, **overrides):
    # Adam's first step is lr * g / (|g| + eps): with the default eps it turns float
    # rounding in near-zero gradients into lr-sized differences. A larger eps keeps
    # the update a smooth function of the gradient, so equal gradients show as
    # equal weights.
    mesh, trainer = spawn_trainer(checkpoint, procs=procs, eps=1e-3, **overrides)
    try:
        metrics = trainer.train_step.call(batch()).get()
        weights = trainer.full_state_dict.call().get()
        return [m.metrics for _, m in metrics.items()], [w for _, w in weights.items()]
    finally:
        asyncio.run(meshes.stop_all(mesh))


def assert_same_step(reference, metrics: list[dict], weights: list[dict], tolerance: float) -> None:
    ref_metrics, ref_weights = reference
    for rank_metrics in metrics:
        assert abs(rank_metrics["train/loss"] - ref_metrics["train/loss"]) < tolerance
        assert abs(rank_metrics["train/grad_norm"] - ref_metrics["train/grad_norm"]) < 10 * tolerance
        assert abs(rank_metrics["train/entropy"] - ref_metrics["train/entropy"]) < 10 * tolerance
    for rank_weights in weights:
        assert rank_weights.keys() == ref_weights.keys()
        worst = max((rank_weights[k] - ref_weights[k]).abs().max().item() for k in ref_weights)
        assert worst < tolerance
