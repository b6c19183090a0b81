"""FSDP2 over 2 gloo ranks, and gradient accumulation over micro-batches, compute the same step
as 1 rank (a plain model) with the whole batch in one forward; checkpoints move between the
two; a reference policy held in the trainer (scorers[i].runs_on=trainer) matches reference
logprobs the episodes bring."""

import asyncio

import pytest
import torch

from forge_async.learning.config import TrainerConfig
from forge_async.learning.spec import LearnerSpec
from forge_async.data.episode import Episode
from forge_async.handles import meshes
from forge_async.losses.grpo import sequence_logprobs
from forge_async.models.titan import load_frozen_model
from forge_async.weights.config import WeightsConfig
from forge_async.weights.shared_memory import SharedMemoryChannel
from tests.support.digits import PAD_ID, fixed_sequences
from tests.support.fsdp_steps import assert_same_step, batch, step
from tests.support.meshes import spawn_trainer

pytestmark = pytest.mark.procs


@pytest.fixture(scope="module")
def one_rank_step(tiny_checkpoint, weight_store):
    """The reference: one rank, the whole batch in one forward."""
    (metrics,), (weights,) = step(tiny_checkpoint, procs=1)
    return metrics, weights


def test_two_ranks_match_one_rank(tiny_checkpoint, one_rank_step):
    metrics, weights = step(tiny_checkpoint, procs=2)
    assert len(metrics) == 2
    assert_same_step(one_rank_step, metrics, weights, 1e-6)
    # The step really changed the weights (the comparison above is not vacuous).
    original = tiny_checkpoint.load_hf_state_dict()
    assert max((one_rank_step[1][k] - original[k]).abs().max().item() for k in original) > 1e-4


@pytest.mark.parametrize("procs", [1, 2])
def test_micro_batches_accumulate_to_the_full_batch_step(tiny_checkpoint, one_rank_step, procs):
    """16 episodes of 6-8 tokens under a 16-token budget: 2 rows per micro-batch, 8 or 4
    micro-batches per rank, with gradient accumulation: the same update as one forward."""
    metrics, weights = step(tiny_checkpoint, procs=procs, micro_batch_tokens=16)
    assert_same_step(one_rank_step, metrics, weights, 1e-6)


def test_shared_memory_push_from_two_ranks_keeps_two_versions_at_most(tiny_checkpoint, tmp_path):
    """Each rank writes its own shard into the version's slot; readers see full tensors."""
    weights = WeightsConfig(transport="shm", channel_dir=str(tmp_path / "channel"))
    mesh, trainer = spawn_trainer(tiny_checkpoint, procs=2, weights=weights)
    channel = SharedMemoryChannel(weights.channel_dir)
    try:
        for _ in range(3):
            trainer.train_step.call(batch()).get()
            pushed = [p for _, p in trainer.push_weights.call().get().items()]
            assert {p.version for p in pushed} == {channel.latest()}
        assert channel.versions() == [2, 3]  # the newest and the one before it, nothing older
        full = [w for _, w in trainer.full_state_dict.call().get().items()][0]
        with channel.reading(3) as (version, read):
            assert version == 3
            assert read.keys() == full.keys()
            assert all(torch.equal(read[k], full[k]) for k in full)
    finally:
        asyncio.run(meshes.stop_all(mesh))


def first(values):
    """Rank 0's value of a mesh call."""
    return next(value for _, value in values.items())


def test_a_checkpoint_moves_between_one_plain_rank_and_two_fsdp_ranks(tiny_checkpoint, weight_store, tmp_path):
    """One fp32 rank trains the plain model, two ranks shard it (models/parallelize.py); DCP
    reshards between the two: each resumes the other's checkpoint and takes the same next step."""
    one_procs, one = spawn_trainer(tiny_checkpoint, procs=1, eps=1e-3)
    two_procs, two = spawn_trainer(tiny_checkpoint, procs=2, eps=1e-3)
    try:
        one.train_step.call(batch()).get()
        one.save_state.call(str(tmp_path / "one")).get()
        assert {v for _, v in two.load_state.call(str(tmp_path / "one")).get().items()} == {1}
        for trainer in (one, two):
            trainer.train_step.call(batch()).get()
        two.save_state.call(str(tmp_path / "two")).get()  # version 2, sharded
        assert_same_step(
            (first(one.train_step.call(batch()).get()).metrics, first(one.full_state_dict.call().get())),
            [m.metrics for _, m in two.train_step.call(batch()).get().items()],
            [w for _, w in two.full_state_dict.call().get().items()],
            1e-6,
        )
        assert first(one.load_state.call(str(tmp_path / "two")).get()) == 2
        resumed = first(one.train_step.call(batch()).get())
        assert resumed.version == 3
        assert_same_step(
            (resumed.metrics, first(one.full_state_dict.call().get())),
            [],
            [first(two.full_state_dict.call().get())],
            1e-6,
        )
    finally:
        asyncio.run(meshes.stop_all(one_procs, two_procs))


def kl_steps(checkpoint, procs: int, reference_path: str | None, episodes: list[Episode], steps: int = 2):
    """`steps` train steps on `episodes` with a KL penalty (coef 0.5); the rank-0 metrics of
    each and the final weights."""
    config = TrainerConfig(procs=procs, eps=1e-3, micro_batch_tokens=16, lr_schedule="constant")
    spec = LearnerSpec(str(checkpoint.path), config, PAD_ID, kl_coef=0.5, reference_path=reference_path)
    mesh, trainer = asyncio.run(meshes.spawn_trainer(spec, WeightsConfig("torchstore")))
    try:
        metrics = [first(trainer.train_step.call(episodes).get()).metrics for _ in range(steps)]
        return metrics, first(trainer.full_state_dict.call().get())
    finally:
        asyncio.run(meshes.stop_all(mesh))


def test_reference_in_the_trainer_matches_reference_logprobs_carried_by_the_episodes(tiny_checkpoint):
    """2 ranks holding the reference (with micro-batches, so some ranks pad empty ones) take the
    same KL-penalised steps as 1 rank whose episodes carry the initial policy's logprobs."""
    carried = batch()
    initial = sequence_logprobs(load_frozen_model(tiny_checkpoint), fixed_sequences() * 2, PAD_ID, "cpu")
    for episode, logprobs in zip(carried, initial, strict=True):
        episode.reference_logprobs = logprobs[len(episode.completion.prompt_ids) - 1 :]
    in_trainer, in_trainer_weights = kl_steps(tiny_checkpoint, 2, str(tiny_checkpoint.path), batch())
    from_episodes, from_episodes_weights = kl_steps(tiny_checkpoint, 1, None, carried)
    assert in_trainer[0]["kl/reference"] < 1e-9  # the reference is the initial policy
    assert in_trainer[1]["kl/reference"] > 1e-6  # the policy moved away from it
    for ours, theirs in zip(in_trainer, from_episodes, strict=True):
        assert ours["kl/reference"] == pytest.approx(theirs["kl/reference"], rel=1e-4, abs=1e-9)
        assert ours["train/loss"] == pytest.approx(theirs["train/loss"], rel=1e-5)
    worst = max((in_trainer_weights[k] - from_episodes_weights[k]).abs().max().item() for k in in_trainer_weights)
    assert worst < 1e-6
