"""FSDP2 over 2 gloo ranks computes the same step as 1 rank."""

import asyncio

import torch

from conftest import fixed_sequences, spawn_trainer
from forge_async.data.episode import Completion, Episode
from forge_async.launch import meshes
from forge_async.weights.config import WeightsConfig
from forge_async.weights.shared_memory import SharedMemoryChannel


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


def step(checkpoint, procs: int):
    # Adam's first step is lr * g / (|g| + eps): with the default eps it turns float
    # rounding in near-zero gradients into lr-sized differences. A larger eps keeps
    # the update a smooth function of the gradient, so equal gradients show as
    # equal weights.
    mesh, trainer = spawn_trainer(checkpoint, procs=procs, eps=1e-3)
    try:
        metrics = trainer.train_step.call(batch()).get()
        weights = trainer.full_state_dict.call().get()
        return [m for _, m in metrics.items()], [w for _, w in weights.items()]
    finally:
        asyncio.run(meshes.stop_all(mesh))


def test_two_ranks_match_one_rank(tiny_checkpoint, weight_store):
    (one,), (w_one,) = step(tiny_checkpoint, procs=1)
    two, w_two = step(tiny_checkpoint, procs=2)
    assert len(two) == 2
    for rank_metrics in two:
        assert abs(rank_metrics["train/loss"] - one["train/loss"]) < 1e-6
        assert abs(rank_metrics["train/grad_norm"] - one["train/grad_norm"]) < 1e-5
    for rank_weights in w_two:
        assert rank_weights.keys() == w_one.keys()
        worst = max((rank_weights[k] - w_one[k]).abs().max().item() for k in w_one)
        assert worst < 1e-6
    # The step really changed the weights (the comparison above is not vacuous).
    original = tiny_checkpoint.load_hf_state_dict()
    assert max((w_one[k] - original[k]).abs().max().item() for k in original) > 1e-4


def test_shared_memory_push_from_two_ranks_keeps_two_versions_at_most(tiny_checkpoint, tmp_path):
    """Each rank writes its own shard into the version's slot; readers see full tensors."""
    weights = WeightsConfig(transport="shm", channel_dir=str(tmp_path / "channel"))
    mesh, trainer = spawn_trainer(tiny_checkpoint, procs=2, weights=weights)
    channel = SharedMemoryChannel(weights.channel_dir)
    try:
        for _ in range(3):
            trainer.train_step.call(batch()).get()
            pushed = [p for _, p in trainer.push_weights.call().get().items()]
            assert {p["version"] for p in pushed} == {channel.latest()}
        assert channel.versions() == [2, 3]  # the newest and the one before it, nothing older
        full = [w for _, w in trainer.full_state_dict.call().get().items()][0]
        with channel.reading(3) as (version, read):
            assert version == 3
            assert read.keys() == full.keys()
            assert all(torch.equal(read[k], full[k]) for k in full)
    finally:
        asyncio.run(meshes.stop_all(mesh))
