"""Generator <-> trainer: logprob parity, versioned weight round trips through torchstore."""

import asyncio
import math

import pytest
import torch
import transformers

from conftest import fixed_sequences, spawn_generator, spawn_trainer
from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import Completion, Episode
from forge_async.handles import meshes
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.config import TinyModelConfig
from forge_async.models.tiny import create_tiny_checkpoint
from forge_async.weights import store

TOLERANCE = 1e-4


def max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


@pytest.fixture(scope="module")
def trainer(tiny_checkpoint, weight_store):
    procs, trainer = spawn_trainer(tiny_checkpoint, procs=1)
    yield trainer
    asyncio.run(meshes.stop_all(procs))


# bfloat16 on both sides: measured max |difference| 1.9e-3 - 3.4e-3 on the tiny models (docs/benchmarks.md).
BF16_TOLERANCE = 1e-2


def sampled_parity(generator, trainer) -> float:
    """Max |generator logprob - trainer logprob| over freshly sampled tokens."""
    groups = generator.generate.call_one(
        [[11, 3, 1, 4, 13], [11, 9, 2, 6, 13]], SamplingConfig(max_tokens=6), n=4
    ).get()
    completions = [c for group in groups for c in group]
    scored = trainer.sequence_logprobs.call_one(
        [c.prompt_ids + c.token_ids for c in completions]
    ).get()
    return max_diff(
        [c.logprobs for c in completions],
        [s[len(c.prompt_ids) - 1 :] for c, s in zip(completions, scored)],
    )


def toy_episodes(generator) -> list[Episode]:
    groups = generator.generate.call_one(
        [[11, 5, 2, 8, 13]], SamplingConfig(max_tokens=4), n=8
    ).get()
    return [
        Episode(c, reward=float(i % 2), advantage=1.0 if i % 2 else -1.0)
        for i, c in enumerate(groups[0])
    ]


def assert_parity_across_one_step(generator, trainer, tolerance: float = TOLERANCE) -> list[list[float]]:
    """The generator and the trainer agree at v0 and, after one step synced through the store,
    at v1 (which differs from v0). Returns the generator's v0 logprobs of `fixed_sequences()`."""
    sequences = fixed_sequences()
    # v0: the generator and the trainer agree on sampled tokens and on fixed sequences.
    assert generator.get_version.call_one().get() == 0
    assert sampled_parity(generator, trainer) < tolerance
    v0 = generator.score.call_one(sequences).get()
    assert max_diff(v0, trainer.sequence_logprobs.call_one(sequences).get()) < tolerance

    # One optimizer step -> v1 pushed -> generator loads v1: parity again, and v1 != v0.
    metrics = trainer.train_step.call_one(toy_episodes(generator)).get()
    assert metrics["version"] == 1
    assert trainer.push_weights.call_one().get().version == 1
    assert generator.load_version.call_one(1).get()["version"] == 1
    assert generator.get_version.call_one().get() == 1
    v1 = generator.score.call_one(sequences).get()
    assert max_diff(v1, trainer.sequence_logprobs.call_one(sequences).get()) < tolerance
    assert sampled_parity(generator, trainer) < tolerance
    assert max_diff(v0, v1) > 1e-3
    return v0


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


def fp32_logprobs(checkpoint, sequences: list[list[int]]) -> list[list[float]]:
    """transformers' fp32 logprobs of each token after the first."""
    model = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint.path), dtype=torch.float32)
    scores = []
    with torch.no_grad():
        for seq in sequences:
            tokens = torch.tensor([seq])
            log_probs = torch.log_softmax(model(tokens).logits[0, :-1], dim=-1)
            scores.append(log_probs.gather(-1, tokens[0, 1:, None]).squeeze(-1).tolist())
    return scores


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

        await asyncio.gather(call("longest", longest_completion(checkpoint)), call("one token", SamplingConfig(max_tokens=1)))
        return returned

    return asyncio.run(both())


def test_generate_calls_run_one_after_another_by_default(generator, tiny_checkpoint):
    """generator.calls_at_once=1: the first call is answered first, however short the next."""
    assert calls_in_order_of_return(generator, tiny_checkpoint) == ["longest", "one token"]


@pytest.fixture(scope="module")
def unlimited_drain_generator(tmp_path_factory, weight_store):
    """calls_at_once=0 and swap_mode=drain, with a long context: its longest request outlasts
    a version's fetch from torchstore (~0.2-0.4 s)."""
    checkpoint = Checkpoint.open(create_tiny_checkpoint(tmp_path_factory.mktemp("long") / "model", TinyModelConfig(max_seq_len=1024)))
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
        assert (await generator.load_version.call_one(7))["version"] == 7
        return (await running)[0][0]

    try:
        completion = asyncio.run(load_during_a_request())
        assert len(completion.versions) == longest_completion(checkpoint).max_tokens
        assert set(completion.versions) == {0}
        (after,) = generator.generate.call_one([PROMPT], SamplingConfig(max_tokens=2)).get()
        assert set(after[0].versions) == {7}
    finally:
        asyncio.run(store.delete_versions_before(10**9))
