"""Mixture-of-Experts: routing replay in the trainer's routers, routes packed beside the tokens,
and the settings that need (or refuse) an MoE model."""

import asyncio
import json

import numpy as np
import pytest
import torch
import transformers

from forge_async.generation.config import GeneratorConfig
from forge_async.learning.config import TrainerConfig
from forge_async.controller.config import GRPOConfig
from forge_async.data.batch import pack_rows
from forge_async.data.episode import Completion, Episode
from forge_async.errors import ConfigError
from forge_async.handles import meshes
from forge_async.models.config import LoraConfig, ModelConfig, MoeConfig, TinyModelConfig
from forge_async.models.routes import RouteMismatch, moe_layers, moe_step_metrics, routes_given, take_expert_load
from forge_async.models.shape import UNKNOWN_ROUTE, ModelShape, UnsupportedModelError
from forge_async.models.titan import build_titan_model, state_dict_adapter
from forge_async.weights import store
from tests.support.digits import fixed_sequences
from tests.support.meshes import spawn_trainer
from tests.support.moe_routes import experts_taken

pytestmark = pytest.mark.unit

TOKENS = torch.tensor([[11, 3, 1, 4, 13, 4, 12, 5], [11, 9, 9, 2, 13, 9, 12, 0]])


@pytest.fixture(scope="module")
def moe_model(tiny_moe_checkpoint):
    model = build_titan_model(tiny_moe_checkpoint.shape)
    model.load_state_dict(
        state_dict_adapter(tiny_moe_checkpoint.shape).from_hf(tiny_moe_checkpoint.load_hf_state_dict())
    )
    return model


def other_routes(free: list[torch.Tensor], num_experts: int) -> torch.Tensor:
    """[B, L, layers, K] uint8 routes that differ from `free` on every other token (each expert
    id shifted by one), UNKNOWN_ROUTE on the last position."""
    routes = torch.stack(free, dim=2).clone()
    routes[:, ::2] = (routes[:, ::2] + 1) % num_experts
    routes[:, -1] = UNKNOWN_ROUTE
    return routes.to(torch.uint8)


def test_replayed_forward_routes_as_the_generator_did(moe_model, tiny_moe_checkpoint):
    taken = experts_taken(moe_model)
    with torch.no_grad():
        free_logits = moe_model(TOKENS)
    free = list(taken)
    num_experts = tiny_moe_checkpoint.shape.moe.num_experts
    given = other_routes(free, num_experts)
    known = given[..., 0] != UNKNOWN_ROUTE  # [B, L, layers]

    # Replay off: the routers choose their own experts, and count where the given ones differ.
    taken.clear()
    mismatch = RouteMismatch(moe_model)
    with routes_given(moe_model, given, replay=False), torch.no_grad():
        assert torch.equal(moe_model(TOKENS), free_logits)
    mismatch.add_last_forward()
    assert all(torch.equal(a, b) for a, b in zip(taken, free))
    differs = known.sum(dim=(0, 1)).float()  # every known token at an even position was shifted
    even = torch.zeros_like(known)
    even[:, ::2] = True
    assert torch.equal(mismatch.differ, (known & even).sum(dim=(0, 1)).float())
    assert torch.equal(mismatch.compared, differs)

    # Replay on: the given experts where known, the router's own on the last token.
    taken.clear()
    moe_model.train()
    with routes_given(moe_model, given, replay=True):
        logits = moe_model(TOKENS)
        logits.logsumexp(-1).mean().backward()
    for layer, (got, own) in enumerate(zip(taken, free)):
        expected = torch.where(known[:, :, layer, None], given[:, :, layer].long().sort(-1).values, own)
        assert torch.equal(got, expected)
    assert not torch.allclose(logits, free_logits)
    # The gate still learns: its scores weight the replayed experts.
    assert all(layer.router.gate.weight.grad.abs().sum() > 0 for layer in moe_layers(moe_model))
    assert all(layer.router.given is None for layer in moe_layers(moe_model))  # handed back
    moe_model.zero_grad()


def test_replaying_the_routers_own_routes_changes_nothing(moe_model):
    taken = experts_taken(moe_model)
    with torch.no_grad():
        free_logits = moe_model(TOKENS)
        own = torch.stack(list(taken), dim=2).to(torch.uint8)
        with routes_given(moe_model, own, replay=True):
            assert torch.allclose(moe_model(TOKENS), free_logits, atol=1e-6)


def test_expert_load_and_step_metrics(moe_model):
    moe_model.train()
    take_expert_load(moe_model)
    with torch.no_grad():
        moe_model(TOKENS)
    load = take_expert_load(moe_model)
    k = moe_layers(moe_model)[0].router.top_k
    assert load.shape[0] == len(moe_layers(moe_model)) and torch.all(load.sum(-1) == TOKENS.numel() * k)
    assert take_expert_load(moe_model).sum() == 0  # taken: zeroed
    metrics = moe_step_metrics(
        torch.tensor([1.0, 3.0]), torch.tensor([10.0, 10.0]), torch.tensor([[2.0, 2.0], [3.0, 1.0]])
    )
    assert metrics["moe/route_mismatch"] == pytest.approx(0.2)
    assert metrics["moe/route_mismatch/layer_1"] == pytest.approx(0.3)
    assert metrics["moe/expert_load_max"] == pytest.approx(1.5)
    assert "moe/route_mismatch" not in moe_step_metrics(torch.zeros(2), torch.zeros(2), torch.ones(2, 2))


def completion(prompt: list[int], tokens: list[int], layer_value: int) -> Completion:
    """Routes whose every entry says which completion (and position) it came from."""
    rows = len(prompt) + len(tokens) - 1
    routes = np.zeros((rows, 2, 2), dtype=np.uint8)
    routes[:, 0, :] = np.arange(rows)[:, None]
    routes[:, 1, :] = layer_value
    return Completion(prompt, tokens, [0.0] * len(tokens), [0] * len(tokens), "", "stop", routes=routes)


def test_routes_are_packed_where_their_tokens_are():
    prompt = [11, 3, 1, 13]
    a, b = completion(prompt, [4, 12], 100), completion(prompt, [9, 9, 12], 200)
    c = Completion([11, 5, 13], [5, 12], [0.0, 0.0], [0, 0], "", "stop")  # no routes
    batch = pack_rows([[Episode(a, 0.0, 0.0), Episode(b, 0.0, 0.0)], [Episode(c, 0.0, 0.0)]], pad_id=0)
    routes = batch.routes
    assert routes.shape == (2, 4 + 2 + 3, 2, 2) and routes.dtype == torch.uint8
    row = routes[0, :, 0, 0].tolist()
    # prompt (a's), a's first response token (its last has none), b's first two (its last: none)
    assert row == [0, 1, 2, 3, 4, UNKNOWN_ROUTE, 4, 5, UNKNOWN_ROUTE]
    assert routes[0, :, 1, 0].tolist() == [100] * 5 + [UNKNOWN_ROUTE] + [200] * 2 + [UNKNOWN_ROUTE]
    assert torch.all(routes[1] == UNKNOWN_ROUTE)  # no routes recorded: routed freely
    dense = Completion(prompt, [4], [0.0], [0], "", "stop")
    assert pack_rows([[Episode(dense, 0.0, 0.0)]], pad_id=0).routes is None


def test_routes_must_cover_the_tokens_fed_to_the_model():
    with pytest.raises(ValueError, match="5 tokens that were fed to the model but 6 routes"):
        Completion([1, 2, 3], [4, 5, 6], [0.0] * 3, [0] * 3, "", "stop", routes=np.zeros((6, 2, 2), np.uint8))


def moe_hf_config(**keys) -> dict:
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "vocab_size": 100,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "max_position_embeddings": 64,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "norm_topk_prob": True,
        **keys,
    }


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"decoder_sparse_step": 2}, "decoder_sparse_step=2"),
        ({"mlp_only_layers": [0]}, r"mlp_only_layers=\[0\]"),
        ({"num_experts": 300}, "num_experts=300"),
        ({"num_experts_per_tok": 9}, "num_experts_per_tok=9"),
    ],
)
def test_unsupported_moe_settings_are_named(keys, message):
    with pytest.raises(UnsupportedModelError, match=message):
        ModelShape.from_hf_config(moe_hf_config(**keys), "model")


def test_settings_that_need_or_refuse_an_moe_model_fail_before_any_proc(tmp_path):
    with pytest.raises(ConfigError, match="moe.routing_replay=rollout: the model is dense"):
        GRPOConfig(moe=MoeConfig("rollout")).check_paths()
    (tmp_path / "config.json").write_text(json.dumps(moe_hf_config()))
    GRPOConfig(moe=MoeConfig("rollout"), model=ModelConfig(path=str(tmp_path))).check_paths()
    lora = ModelConfig(tiny=TinyModelConfig(family="qwen3_moe"), lora=LoraConfig(rank=4))
    with pytest.raises(ConfigError, match="model.lora.targets: gate_proj, up_proj, down_proj are dense MLP"):
        GRPOConfig(model=lora).check_paths()
    packed = GRPOConfig(model=ModelConfig(path=str(tmp_path)), generator=GeneratorConfig(cpu_weights="packed"))
    with pytest.raises(ConfigError, match="generator.cpu_weights=packed: vLLM's layer-wise reload"):
        packed.check_paths()
    (tmp_path / "config.json").write_text(json.dumps(moe_hf_config(decoder_sparse_step=2)))
    with pytest.raises(UnsupportedModelError, match="model.path="):
        GRPOConfig(model=ModelConfig(path=str(tmp_path))).check_paths()
    with pytest.raises(ConfigError, match="moe.routing_replay='sometimes': one of off, rollout"):
        MoeConfig("sometimes")


@pytest.mark.parametrize(
    "model, trainer, message",
    [
        (ModelConfig(), TrainerConfig(procs=2, expert_parallel=2), "trainer.expert_parallel=2: the model is dense"),
        (
            ModelConfig(tiny=TinyModelConfig(family="qwen3_moe", num_experts=6)),
            TrainerConfig(procs=4, expert_parallel=4),
            "trainer.expert_parallel=4 must divide the model's num_experts=6",
        ),
    ],
)
def test_expert_parallel_needs_an_moe_model_whose_experts_it_divides(model, trainer, message):
    with pytest.raises(ConfigError, match=message):
        GRPOConfig(model=model, trainer=trainer).check_paths()
    GRPOConfig(
        model=ModelConfig(tiny=TinyModelConfig(family="qwen3_moe")), trainer=TrainerConfig(procs=2, expert_parallel=2)
    ).check_paths()


def test_expert_parallel_must_divide_the_trainer_procs():
    with pytest.raises(ConfigError, match="trainer.expert_parallel=2 must divide trainer.procs=3"):
        TrainerConfig(procs=3, expert_parallel=2)


def routed_episodes(checkpoint) -> list[Episode]:
    """Fixed episodes whose routes are the tiny MoE's own, moved to the next expert on every
    third token: a generator whose routing differs from the trainer's on a third of the routes."""
    model = build_titan_model(checkpoint.shape)
    model.load_state_dict(state_dict_adapter(checkpoint.shape).from_hf(checkpoint.load_hf_state_dict()))
    taken = experts_taken(model)
    episodes = []
    for i, sequence in enumerate(fixed_sequences() * 2):
        taken.clear()
        with torch.no_grad():
            model(torch.tensor([sequence]))
        routes = torch.stack(taken, dim=2)[0]  # [L, layers, K]
        routes[::3] = (routes[::3] + 1) % checkpoint.shape.moe.num_experts
        prompt, response = sequence[:5], sequence[5:]
        completion = Completion(
            prompt,
            response,
            [-2.0] * len(response),
            [0] * len(response),
            "",
            "stop",
            routes=routes[:-1].to(torch.uint8).numpy(),
        )
        episodes.append(Episode(completion, reward=0.0, advantage=(i % 3) - 1.0))
    return episodes


def first(values):
    return next(value for _, value in values.items())


@pytest.mark.procs
def test_moe_trainer_replays_across_ranks_micro_batches_recomputation_and_a_checkpoint(
    tiny_moe_checkpoint, weight_store, tmp_path
):
    """One plain rank against two FSDP ranks with micro-batches and full activation
    recomputation (which must route as the forward did), and against two ranks that split the
    experts (trainer.expert_parallel=2: tokens travel to their experts by all-to-all): the same
    replayed step; the sharded checkpoint resumes on one rank, the expert-parallel one on two FSDP
    ranks; the published and the saved Hugging Face models are the trainer's."""
    episodes = routed_episodes(tiny_moe_checkpoint)
    replay = MoeConfig("rollout")
    one_procs, one = spawn_trainer(tiny_moe_checkpoint, procs=1, eps=1e-3, moe=replay)
    two_procs, two = spawn_trainer(
        tiny_moe_checkpoint, procs=2, eps=1e-3, moe=replay, micro_batch_tokens=16, activation_checkpointing="full"
    )
    ep_procs, ep = spawn_trainer(
        tiny_moe_checkpoint, procs=2, eps=1e-3, moe=replay, expert_parallel=2, activation_checkpointing="full"
    )
    try:
        ref = first(one.train_step.call(episodes).get()).metrics
        rows = sum(len(e.completion.routes) for e in episodes)
        shifted = sum(len(range(0, len(e.completion.routes), 3)) for e in episodes)
        # Every third token's experts moved: as many mismatches in each layer (a shared prompt is
        # computed once, so count over the packed rows is not exact; the rate is close).
        assert 0.25 < ref["moe/route_mismatch"] < 0.45
        assert ref["moe/expert_load_max"] >= 1.0
        metrics = [m.metrics for _, m in two.train_step.call(episodes).get().items()]
        metrics += [m.metrics for _, m in ep.train_step.call(episodes).get().items()]
        assert all(abs(m["train/loss"] - ref["train/loss"]) < 1e-6 for m in metrics)
        assert all(m["train/grad_norm"] == pytest.approx(ref["train/grad_norm"], rel=1e-5) for m in metrics)
        # (their rows differ: a micro-batch shares a prompt among fewer responses)
        assert all(0.25 < m["moe/route_mismatch"] < 0.45 for m in metrics)
        weights = first(one.full_state_dict.call().get())
        for trainer in (two, ep):
            sharded = first(trainer.full_state_dict.call().get())
            assert max((weights[k] - sharded[k]).abs().max().item() for k in weights) < 1e-6
        ep.push_weights.call().get()
        published = asyncio.run(store.get_policy(1))
        assert published.keys() == weights.keys()
        assert max((weights[k] - published[k]).abs().max().item() for k in weights) < 1e-6

        two.save_state.call(str(tmp_path / "two")).get()
        assert first(one.load_state.call(str(tmp_path / "two")).get()) == 1
        ep.save_state.call(str(tmp_path / "ep")).get()
        assert first(two.load_state.call(str(tmp_path / "ep")).get()) == 1
        resumed = [first(t.train_step.call(episodes).get()) for t in (one, two, ep)]
        assert all(m.version == 2 for m in resumed)
        assert all(abs(m.metrics["train/loss"] - resumed[0].metrics["train/loss"]) < 1e-6 for m in resumed)

        saved = first(ep.save_hf.call(str(tmp_path / "hf")).get()).path
        reference = transformers.AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32)
        sequences = fixed_sequences()
        ours = first(one.sequence_logprobs.call(sequences).get())
        for sequence, logprobs in zip(sequences, ours):
            with torch.no_grad():
                theirs = reference(torch.tensor([sequence])).logits.log_softmax(-1)[0, :-1]
            expected = theirs.gather(-1, torch.tensor(sequence[1:])[:, None])[:, 0]
            assert torch.allclose(torch.tensor(logprobs), expected, atol=1e-4)
    finally:
        asyncio.run(meshes.stop_all(one_procs, two_procs, ep_procs))
        asyncio.run(store.delete_versions_before(10**9))  # the store is the session's
    assert rows > shifted > 0


@pytest.mark.procs
def test_lora_on_an_moe_model_adapts_attention_and_leaves_experts_and_router_frozen(tiny_moe_checkpoint, weight_store):
    lora = LoraConfig(rank=4, targets=["q_proj", "k_proj", "v_proj", "o_proj"])
    procs, trainer = spawn_trainer(tiny_moe_checkpoint, procs=1, lora=lora, lr=1e-2)
    try:
        trainer.train_step.call(routed_episodes(tiny_moe_checkpoint)).get()
        adapter = first(trainer.adapter_state_dict.call().get())
        base = first(trainer.full_state_dict.call(merged=False).get())
        merged = first(trainer.full_state_dict.call().get())
    finally:
        asyncio.run(meshes.stop_all(procs))
    layers = tiny_moe_checkpoint.shape.n_layers
    assert len(adapter) == layers * 4 * 2 and all(".self_attn." in key for key in adapter)
    original = tiny_moe_checkpoint.load_hf_state_dict()
    assert all(torch.equal(base[k], original[k]) for k in original)  # the base, experts and gate too
    moved = {k for k in original if not torch.equal(merged[k], original[k])}
    assert moved and all(".self_attn." in k for k in moved)
