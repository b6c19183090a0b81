"""LoRA: adapter-only training under FSDP2 (1 and 2 ranks), the merged and PEFT outputs, and
generator (vLLM base + adapter) vs trainer parity with adapters synced through torchstore and
shared memory."""

import asyncio
import json
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from forge_async.learning.results import PolicySaved
from forge_async.handles import meshes
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.config import LoraConfig
from forge_async.models.peft import CONFIG_FILE, WEIGHTS_FILE, peft_key, target_modules
from forge_async.weights import store
from forge_async.weights.config import WeightsConfig
from tests.support.digits import fixed_sequences
from tests.support.fsdp_steps import assert_same_step, batch, step
from tests.support.meshes import spawn_generator, spawn_trainer
from tests.support.parity import TOLERANCE, assert_parity_across_one_step, fp32_logprobs, max_diff

pytestmark = pytest.mark.procs

LORA = LoraConfig(rank=4, alpha=16.0)
# Adapters start at B = 0 and move by ~lr per step: a LoRA-sized lr makes one step visible.
LORA_LR = 1e-2


def test_two_ranks_match_one_rank(tiny_checkpoint, weight_store):
    reference = step(tiny_checkpoint, procs=1, lora=LORA)
    metrics, weights = step(tiny_checkpoint, procs=2, lora=LORA)
    assert_same_step((reference[0][0], reference[1][0]), metrics, weights, 1e-6)
    # The step changed the (merged) weights: the comparison above is not vacuous.
    original = tiny_checkpoint.load_hf_state_dict()
    assert max((weights[0][k] - original[k]).abs().max().item() for k in original) > 1e-5


def rank0(future):
    """Rank 0's answer to a call every rank of a trainer mesh must join."""
    return next(value for _, value in future.get().items())


def merged_by_hand(base: dict, adapter: dict, lora: LoraConfig) -> dict:
    """base + (alpha / rank) B A for every adapted module, in Hugging Face names."""
    merged = dict(base)
    for module in target_modules(list(base), lora):
        a, b = adapter[peft_key(module, "A")], adapter[peft_key(module, "B")]
        merged[f"{module}.weight"] = base[f"{module}.weight"] + lora.scale * b @ a
    return merged


def test_only_adapters_train_and_the_outputs_are_merged_and_peft(tiny_checkpoint, weight_store, tmp_path):
    lora = LoraConfig(rank=4, alpha=8.0, targets=["q_proj", "k_proj", "v_proj", "down_proj"])
    procs, trainer = spawn_trainer(tiny_checkpoint, procs=2, lora=lora, lr=LORA_LR)
    try:
        for _ in range(2):
            trainer.train_step.call(batch()).get()
        base = rank0(trainer.full_state_dict.call(merged=False))
        adapter = rank0(trainer.adapter_state_dict.call())
        saved = rank0(trainer.save_hf.call(str(tmp_path / "merged"), str(tmp_path / "adapter")))
        assert saved == PolicySaved(str(tmp_path / "merged"))
        policy = rank0(trainer.sequence_logprobs.call(fixed_sequences()))
        pushed = rank0(trainer.push_weights.call())
    finally:
        asyncio.run(meshes.stop_all(procs))
        asyncio.run(store.delete_versions_before(10**9))

    # Only the adapters moved: the base is the checkpoint's, bit for bit.
    original = tiny_checkpoint.load_hf_state_dict()
    assert base.keys() == original.keys()
    assert all(torch.equal(base[k], original[k]) for k in original)
    assert max(t.abs().max().item() for k, t in adapter.items() if "lora_B" in k) > 1e-3  # B left zero
    # Adapters exactly on the targets (k and v of every layer, no o_proj, gate_proj, up_proj).
    modules = {k.removeprefix("base_model.model.").rsplit(".lora_", 1)[0] for k in adapter}
    assert modules == set(target_modules(list(original), lora))
    assert len(modules) == 4 * tiny_checkpoint.shape.n_layers
    # Only adapter bytes were published.
    assert pushed.weight_bytes == sum(t.numel() * t.element_size() for t in adapter.values())

    # The merged checkpoint is base + (alpha / rank) B A, and transformers runs it as the trainer does.
    merged = load_file(str(tmp_path / "merged" / "model.safetensors"))
    expected = merged_by_hand(original, adapter, lora)
    assert merged.keys() == expected.keys()
    assert max((merged[k] - expected[k]).abs().max().item() for k in expected) < 1e-6
    merged_checkpoint = Checkpoint.open(tmp_path / "merged")
    assert max_diff(fp32_logprobs(merged_checkpoint, fixed_sequences()), policy) < TOLERANCE

    # The adapter directory is PEFT's layout.
    config = json.loads((tmp_path / "adapter" / CONFIG_FILE).read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", 4, 8.0)
    assert sorted(config["target_modules"]) == sorted(lora.targets)
    saved = load_file(str(tmp_path / "adapter" / WEIGHTS_FILE))
    assert saved.keys() == adapter.keys()
    assert all(torch.equal(saved[k], adapter[k]) for k in adapter)


def adapter_directories() -> set:
    """Adapter directories of generators composed without a scratch directory (weights.channel_dir)."""
    return set(Path(tempfile.gettempdir()).glob("forge_async-adapter-*"))


def test_parity_with_adapters_synced_through_torchstore(tiny_checkpoint, weight_store):
    before = adapter_directories()
    generator_procs, generator = spawn_generator(tiny_checkpoint, lora=LORA)
    trainer_procs, trainer = spawn_trainer(tiny_checkpoint, procs=1, lora=LORA, lr=LORA_LR)
    try:
        assert len(adapter_directories() - before) == 1  # the generator's adapter
        assert_parity_across_one_step(generator, trainer)
    finally:
        asyncio.run(meshes.stop_all(trainer_procs, generator_procs))
        asyncio.run(store.delete_versions_before(10**9))
    assert adapter_directories() == before  # removed with the generator's proc


def test_parity_with_adapters_synced_through_shared_memory(tiny_llama_checkpoint, tmp_path):
    """Llama (its q/k rows reordered on the way to HF names), 2 trainer ranks each writing its
    shard of the adapters, a generator that picks each version up by itself."""
    checkpoint = tiny_llama_checkpoint
    weights = WeightsConfig(transport="shm", channel_dir=str(tmp_path / "channel"))
    generator_procs, generator = spawn_generator(checkpoint, weights=weights, lora=LORA)
    trainer_procs, trainer = spawn_trainer(checkpoint, procs=2, weights=weights, lora=LORA, lr=LORA_LR)
    sequences = fixed_sequences()
    try:
        v0 = generator.score.call_one(sequences).get()
        assert max_diff(v0, rank0(trainer.sequence_logprobs.call(sequences))) < TOLERANCE
        for version in (1, 2):
            trainer.train_step.call(batch()).get()
            trainer.push_weights.call().get()
            while generator.get_version.call_one().get() < version:
                pass
            scored = generator.score.call_one(sequences).get()
            assert max_diff(scored, rank0(trainer.sequence_logprobs.call(sequences))) < TOLERANCE
        assert max_diff(v0, scored) > 1e-3
    finally:
        asyncio.run(meshes.stop_all(trainer_procs, generator_procs))


def test_a_checkpoint_restores_the_adapters_and_their_optimizer_state(tiny_checkpoint, weight_store, tmp_path):
    """save_state / load_state (DCP) with frozen base weights: after a load, the next step is the
    step the saved trainer took (Adam's moments came back too)."""
    procs, trainer = spawn_trainer(tiny_checkpoint, procs=1, lora=LORA, lr=LORA_LR)
    try:
        trainer.train_step.call(batch()).get()
        trainer.save_state.call(str(tmp_path / "state")).get()
        saved = rank0(trainer.adapter_state_dict.call())
        trainer.train_step.call(batch()).get()
        stepped = rank0(trainer.adapter_state_dict.call())
        assert rank0(trainer.load_state.call(str(tmp_path / "state"))) == 1
        assert all(torch.equal(t, saved[k]) for k, t in rank0(trainer.adapter_state_dict.call()).items())
        trainer.train_step.call(batch()).get()
        again = rank0(trainer.adapter_state_dict.call())
        assert all(torch.equal(t, stepped[k]) for k, t in again.items())
        assert any(not torch.equal(t, saved[k]) for k, t in again.items())
    finally:
        asyncio.run(meshes.stop_all(procs))
