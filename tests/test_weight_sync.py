"""Generator <-> trainer: logprob parity, versioned weight round trips through torchstore."""

import asyncio
import math

import pytest
import torch

from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import Completion
from forge_async.handles import meshes
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.config import TinyModelConfig
from forge_async.models.tiny import create_tiny_checkpoint
from forge_async.weights import store
from tests.support.digits import fixed_sequences
from tests.support.meshes import spawn_generator, spawn_trainer
from tests.support.parity import TOLERANCE, assert_parity_across_one_step, fp32_logprobs, max_diff

pytestmark = pytest.mark.procs


@pytest.fixture(scope="module")
def trainer(tiny_checkpoint, weight_store):
    procs, trainer = spawn_trainer(tiny_checkpoint, procs=1)
    yield trainer
    asyncio.run(meshes.stop_all(procs))


# bfloat16 on both sides: measured max |difference| 1.9e-3 - 3.4e-3 on the tiny models (docs/benchmarks.md).
BF16_TOLERANCE = 1e-2


def test_weight_round_trip(generator, trainer, tiny_checkpoint):
    sequences = fixed_sequences()
    v0 = assert_parity_across_one_step(generator, trainer)

    # Zeroed weights make every logit zero: each logprob is exactly -log(vocab).
    zeros = {k: torch.zeros_like(t) for k, t in tiny_checkpoint.load_hf_state_dict().items()}
    asyncio.run(store.put_policy(zeros, version=1000))
    generator.load_version.call_one(1000).get()
    uniform = -math.log(tiny_checkpoint.shape.vocab_size)
    zeroed = generator.score.call_one(sequences).get()
    assert all(abs(x - uniform) < 1e-6 for row in zeroed for x in row)

    # Pushing the original v0 weights back restores the original logprobs exactly.
    asyncio.run(store.put_policy(tiny_checkpoint.load_hf_state_dict(), version=0))
    generator.load_version.call_one(0).get()
    assert generator.score.call_one(sequences).get() == v0

    # Store hygiene: versions no generator needs any more are deleted.
    assert asyncio.run(store.delete_versions_before(1000)) == [0, 1]
    assert asyncio.run(store.stored_versions()) == [1000]
    asyncio.run(store.delete_versions_before(10**9))
    assert asyncio.run(store.stored_versions()) == []


def test_text_prompts_are_tokenized_by_the_checkpoint_tokenizer(generator):
    (group,) = generator.generate.call_one(["<bos>31<sep>"], SamplingConfig(max_tokens=2), n=2).get()
    assert [c.prompt_ids for c in group] == [[11, 3, 1, 13]] * 2
    assert all(1 <= len(c.token_ids) <= 2 and len(c.logprobs) == len(c.token_ids) for c in group)
    assert all(c.finish_reason in ("stop", "length") for c in group)


def test_prompt_longer_than_context_names_the_prompt(generator, tiny_checkpoint):
    too_long = [11] + [1] * tiny_checkpoint.shape.max_seq_len
    with pytest.raises(Exception, match="exceeds the context"):
        generator.generate.call_one([too_long], SamplingConfig(max_tokens=4)).get()


@pytest.mark.parametrize("checkpoint_fixture", ["tiny_llama_checkpoint", "tiny_moe_checkpoint"])
def test_parity_of_other_families_before_and_after_a_weight_sync(checkpoint_fixture, weight_store, request):
    """Llama (TorchTitan's Llama 3 model and adapter, Llama 3.1 RoPE scaling) against vLLM's Llama;
    Qwen3-MoE (TorchTitan's MoE, its experts packed by vLLM's CPU kernel) against vLLM's."""
    checkpoint = request.getfixturevalue(checkpoint_fixture)
    generator_procs, generator = spawn_generator(checkpoint)
    trainer_procs, trainer = spawn_trainer(checkpoint, procs=1)
    try:
        assert_parity_across_one_step(generator, trainer)
    finally:
        asyncio.run(meshes.stop_all(trainer_procs, generator_procs))
        asyncio.run(store.delete_versions_before(10**9))


def test_bfloat16_parity_before_and_after_a_weight_sync(tiny_checkpoint, weight_store):
    """trainer.dtype=bfloat16 (FSDP2 mixed precision) against a bfloat16 vLLM engine: the weights
    travel in bfloat16 and both sides agree within bf16's precision."""
    generator_procs, generator = spawn_generator(tiny_checkpoint, dtype="bfloat16")
    trainer_procs, trainer = spawn_trainer(tiny_checkpoint, procs=1, dtype="bfloat16")
    try:
        v0 = assert_parity_across_one_step(generator, trainer, BF16_TOLERANCE)
        # Not vacuous: the engine really ran in bf16 (its logprobs differ from fp32's beyond fp32 parity).
        assert BF16_TOLERANCE > max_diff(v0, fp32_logprobs(tiny_checkpoint, fixed_sequences())) > TOLERANCE
    finally:
        asyncio.run(meshes.stop_all(trainer_procs, generator_procs))
        asyncio.run(store.delete_versions_before(10**9))


PROMPT = [11, 3, 1, 4, 13]


def longest_completion(checkpoint: Checkpoint) -> SamplingConfig:
    """Exactly as many tokens as the context leaves after PROMPT: the engine's longest request."""
    tokens = checkpoint.shape.max_seq_len - len(PROMPT)
    return SamplingConfig(max_tokens=tokens, min_tokens=tokens)


def calls_in_order_of_return(generator, checkpoint: Checkpoint) -> list[str]:
    """The longest call, then a one-token call, sent together: which came back first."""

    async def both() -> list[str]:
        returned = []

        async def call(name: str, sampling: SamplingConfig) -> None:
            await generator.generate.call_one([PROMPT], sampling)
            returned.append(name)

        await asyncio.gather(
            call("longest", longest_completion(checkpoint)), call("one token", SamplingConfig(max_tokens=1))
        )
        return returned

    return asyncio.run(both())


def test_generate_calls_run_one_after_another_by_default(generator, tiny_checkpoint):
    """generator.calls_at_once=1: the first call is answered first, however short the next."""
    assert calls_in_order_of_return(generator, tiny_checkpoint) == ["longest", "one token"]


@pytest.fixture(scope="module")
def unlimited_drain_generator(tmp_path_factory, weight_store):
    """calls_at_once=0 and swap_mode=drain, with a long context: its longest request outlasts
    a version's fetch from torchstore (~0.2-0.4 s)."""
    checkpoint = Checkpoint.open(
        create_tiny_checkpoint(tmp_path_factory.mktemp("long") / "model", TinyModelConfig(max_seq_len=1024))
    )
    procs, generator = spawn_generator(checkpoint, swap_mode="drain", calls_at_once=0)
    yield checkpoint, generator
    asyncio.run(meshes.stop_all(procs))


def test_generate_calls_run_at_once_with_no_limit(unlimited_drain_generator):
    """calls_at_once=0: a one-token call sent after the longest one comes back first (each
    call's requests join the engine's batch at once)."""
    checkpoint, generator = unlimited_drain_generator
    assert calls_in_order_of_return(generator, checkpoint) == ["one token", "longest"]


def test_drain_mode_loads_a_version_once_the_running_requests_end(unlimited_drain_generator):
    """generator.swap_mode=drain: a version loaded while a request runs waits for that request,
    which is sampled by the old version alone; the next one by the new."""
    checkpoint, generator = unlimited_drain_generator
    asyncio.run(store.put_policy(checkpoint.load_hf_state_dict(), version=7))

    async def load_during_a_request() -> Completion:
        running = generator.generate.call_one([PROMPT], longest_completion(checkpoint))
        # Calls start in the order sent: once this one is answered, the first is in the engine.
        await generator.generate.call_one([PROMPT], SamplingConfig(max_tokens=1))
        assert (await generator.load_version.call_one(7)).version == 7
        return (await running)[0][0]

    try:
        completion = asyncio.run(load_during_a_request())
        assert len(completion.versions) == longest_completion(checkpoint).max_tokens
        assert set(completion.versions) == {0}
        (after,) = generator.generate.call_one([PROMPT], SamplingConfig(max_tokens=2)).get()
        assert set(after[0].versions) == {7}
    finally:
        asyncio.run(store.delete_versions_before(10**9))
