"""Build a TorchTitan model (Qwen3, Qwen3-MoE or Llama 3) from a Hugging Face `config.json`.

TorchTitan ships model configs by named flavour; here the flavour is whatever the
checkpoint's config.json says, so any Qwen3- or Llama-architecture checkpoint (the
tiny one this library creates, or a downloaded one) maps onto TorchTitan's own
modules and its own HF <-> TorchTitan state-dict adapter for that family.
Mixture-of-Experts layers are TorchTitan's, set to compute what the checkpoint does
(models/moe.py). Attention is SDPA, causal, or under the mask of rows that pack a prompt's responses
behind it (models/attention.py); SDPA has a CPU backward (flex has none).
"""

import logging
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn as nn
from torchtitan.components.lora import LoRAConverter
from torchtitan.models.common import ComplexRoPE, CosSinRoPE, Embedding, Linear, RoPE
from torchtitan.models.common.config_utils import make_ffn_config, make_gqa_config
from torchtitan.models.common.decoder import Decoder, TransformerBlock
from torchtitan.models.common.nn_modules import RMSNorm
from torchtitan.models.llama3 import Llama3Model
from torchtitan.models.llama3.model import Llama3TransformerBlock
from torchtitan.models.llama3.state_dict_adapter import Llama3StateDictAdapter
from torchtitan.models.qwen3 import Qwen3Model
from torchtitan.models.qwen3.model import Qwen3TransformerBlock
from torchtitan.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter
from torchtitan.protocols.state_dict_adapter import StateDictAdapter

from forge_async.models.attention import MaskableAttention
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.config import LoraConfig
from forge_async.models.moe import moe_config, split_experts
from forge_async.models.shape import ModelShape

# TorchTitan logs every config build at INFO; only its warnings matter here.
logging.getLogger("torchtitan").setLevel(logging.WARNING)

_INIT_STD = 0.02
_LINEAR_INIT = {"weight": partial(nn.init.normal_, std=_INIT_STD), "bias": nn.init.zeros_}
_NORM_INIT = {"weight": nn.init.ones_}


@dataclass(frozen=True)
class _Family:
    """TorchTitan's classes for one model family.

    The RoPE layout must be the one the family's adapter converts HF weights for:
    Qwen3's adapter keeps HF's q/k rows (rotate-half, CosSinRoPE); Llama 3's permutes
    them into adjacent pairs (ComplexRoPE, which also implements Llama 3.1 scaling).
    """

    model: type[Decoder]
    block: type[TransformerBlock]
    adapter: type[StateDictAdapter]
    rope: type[RoPE]
    qk_norm: bool


_FAMILIES = {
    "qwen3": _Family(Qwen3Model, Qwen3TransformerBlock, Qwen3StateDictAdapter, CosSinRoPE, qk_norm=True),
    "llama": _Family(Llama3Model, Llama3TransformerBlock, Llama3StateDictAdapter, ComplexRoPE, qk_norm=False),
    "qwen3_moe": _Family(Qwen3Model, Qwen3TransformerBlock, Qwen3StateDictAdapter, CosSinRoPE, qk_norm=True),
}


def _norm(dim: int, eps: float) -> RMSNorm.Config:
    return RMSNorm.Config(normalized_shape=dim, eps=eps, param_init=_NORM_INIT)


def _rope(shape: ModelShape, rope: type[RoPE]) -> RoPE.Config:
    scaling = shape.rope_scaling
    llama3_scaling = (
        {}
        if scaling is None
        else {
            "scaling": "llama",
            "scaling_factor": scaling.factor,
            "low_freq_factor": scaling.low_freq_factor,
            "high_freq_factor": scaling.high_freq_factor,
            "original_max_position_embeddings": scaling.original_max_position_embeddings,
        }
    )
    return rope.Config(dim=shape.head_dim, max_seq_len=shape.max_seq_len, theta=shape.rope_theta, **llama3_scaling)


def _block(shape: ModelShape, family: _Family) -> TransformerBlock.Config:
    attention = make_gqa_config(
        dim=shape.dim,
        n_heads=shape.n_heads,
        n_kv_heads=shape.n_kv_heads,
        head_dim=shape.head_dim,
        wqkv_param_init=_LINEAR_INIT,
        wo_param_init=_LINEAR_INIT,
        inner_attention=MaskableAttention.Config(),
        fuse_qkv=False,
        rope=_rope(shape, family.rope),
        qk_norm=_norm(shape.head_dim, shape.norm_eps) if family.qk_norm else None,
    )
    if shape.moe is not None:
        feed_forward = {"moe": moe_config(shape.dim, shape.moe, _LINEAR_INIT)}
    else:
        feed_forward = {
            "feed_forward": make_ffn_config(
                dim=shape.dim, hidden_dim=shape.ffn_dim, w1_param_init=_LINEAR_INIT, w2w3_param_init=_LINEAR_INIT
            )
        }
    return family.block.Config(
        attention_norm=_norm(shape.dim, shape.norm_eps),
        ffn_norm=_norm(shape.dim, shape.norm_eps),
        attention=attention,
        **feed_forward,
    )


def titan_config(shape: ModelShape) -> Decoder.Config:
    family = _FAMILIES[shape.family]
    return family.model.Config(
        vocab_size=shape.vocab_size,
        dim=shape.dim,
        norm=_norm(shape.dim, shape.norm_eps),
        enable_weight_tying=shape.tie_embeddings,
        tok_embeddings=Embedding.Config(
            num_embeddings=shape.vocab_size,
            embedding_dim=shape.dim,
            param_init={"weight": partial(nn.init.normal_, std=_INIT_STD)},
        ),
        lm_head=Linear.Config(in_features=shape.dim, out_features=shape.vocab_size, param_init=_LINEAR_INIT),
        layers=[_block(shape, family) for _ in range(shape.n_layers)],
    )


# TorchTitan's config name of each Hugging Face projection LoRA can target. The key and
# value projections are built from one config (`wkv`): they are adapted together.
LORA_TITAN_MODULES = {
    "q_proj": "wq",
    "k_proj": "wkv",
    "v_proj": "wkv",
    "o_proj": "wo",
    "gate_proj": "w1",
    "up_proj": "w3",
    "down_proj": "w2",
}


def with_lora(config: Decoder.Config, lora: LoraConfig) -> Decoder.Config:
    """The model config with each LoRA target Linear made a LoRALinear (TorchTitan's converter)."""
    targets = sorted({LORA_TITAN_MODULES[t] for t in lora.targets})
    converter = LoRAConverter(LoRAConverter.Config(rank=lora.rank, alpha=lora.alpha, target_modules=targets))
    return converter.convert(config)


def build_titan_model(
    shape: ModelShape, seed: int | None = None, lora: LoraConfig | None = None, expert_parallel: bool = False
) -> Decoder:
    """A TorchTitan model of the shape's family in fp32 on CPU; initialised from `seed` when given;
    with LoRA adapters (`with_lora`; models/lora.py) when `lora` is given; its experts ready to be
    split across ranks (`split_experts`) with `expert_parallel`."""
    config = titan_config(shape)
    if lora is not None:
        config = with_lora(config, lora)
    if expert_parallel:
        split_experts(config)
    model = config.build()
    if seed is not None:
        torch.manual_seed(seed)
    model.init_states()
    return model


def load_frozen_model(
    checkpoint: Checkpoint, weights: dict[str, torch.Tensor] | None = None, expert_parallel: bool = False
) -> Decoder:
    """The checkpoint's model with its weights, on CPU, frozen and in eval mode: a scorer's
    model (a reference policy, a teacher), never trained. `weights`: the checkpoint's, already
    read and in TorchTitan names (copied in, not read again); `expert_parallel`: as for
    `build_titan_model`."""
    model = build_titan_model(checkpoint.shape, expert_parallel=expert_parallel)
    if weights is None:
        weights = state_dict_adapter(checkpoint.shape).from_hf(checkpoint.load_hf_state_dict())
    model.load_state_dict(weights)
    return model.eval().requires_grad_(False)


def state_dict_adapter(shape: ModelShape) -> StateDictAdapter:
    """TorchTitan's own HF <-> TorchTitan name converter for this shape's family."""
    return _FAMILIES[shape.family].adapter(titan_config(shape), None)
