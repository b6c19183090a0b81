"""Build a TorchTitan Qwen3 model from a Hugging Face `config.json`.

TorchTitan ships model configs by named flavour; here the flavour is whatever the
checkpoint's config.json says, so any Qwen3-architecture checkpoint (the tiny one
this library creates, or a downloaded Qwen3) maps onto TorchTitan's own modules.
Attention is plain causal SDPA: batches are right-padded, one sequence per row,
so no document masks are needed, and SDPA has a CPU backward (flex has none).
"""

import logging
from functools import partial

import torch
import torch.nn as nn
from torchtitan.models.common import CosSinRoPE, Embedding, Linear
from torchtitan.models.common.attention import ScaledDotProductAttention
from torchtitan.models.common.config_utils import make_ffn_config, make_gqa_config
from torchtitan.models.common.nn_modules import RMSNorm
from torchtitan.models.qwen3 import Qwen3Model
from torchtitan.models.qwen3.model import Qwen3TransformerBlock
from torchtitan.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter

from forge_async.models.shape import ModelShape

# TorchTitan logs every config build at INFO; only its warnings matter here.
logging.getLogger("torchtitan").setLevel(logging.WARNING)

_INIT_STD = 0.02
_LINEAR_INIT = {"weight": partial(nn.init.normal_, std=_INIT_STD), "bias": nn.init.zeros_}
_NORM_INIT = {"weight": nn.init.ones_}


def _norm(dim: int, eps: float) -> RMSNorm.Config:
    return RMSNorm.Config(normalized_shape=dim, eps=eps, param_init=_NORM_INIT)


def _block(shape: ModelShape) -> Qwen3TransformerBlock.Config:
    attention = make_gqa_config(
        dim=shape.dim,
        n_heads=shape.n_heads,
        n_kv_heads=shape.n_kv_heads,
        head_dim=shape.head_dim,
        wqkv_param_init=_LINEAR_INIT,
        wo_param_init=_LINEAR_INIT,
        inner_attention=ScaledDotProductAttention.Config(),
        fuse_qkv=False,
        rope=CosSinRoPE.Config(
            dim=shape.head_dim, max_seq_len=shape.max_seq_len, theta=shape.rope_theta
        ),
        qk_norm=_norm(shape.head_dim, shape.norm_eps),
    )
    return Qwen3TransformerBlock.Config(
        attention_norm=_norm(shape.dim, shape.norm_eps),
        ffn_norm=_norm(shape.dim, shape.norm_eps),
        attention=attention,
        feed_forward=make_ffn_config(
            dim=shape.dim,
            hidden_dim=shape.ffn_dim,
            w1_param_init=_LINEAR_INIT,
            w2w3_param_init=_LINEAR_INIT,
        ),
    )


def titan_config(shape: ModelShape) -> Qwen3Model.Config:
    return Qwen3Model.Config(
        vocab_size=shape.vocab_size,
        dim=shape.dim,
        norm=_norm(shape.dim, shape.norm_eps),
        enable_weight_tying=shape.tie_embeddings,
        tok_embeddings=Embedding.Config(
            num_embeddings=shape.vocab_size,
            embedding_dim=shape.dim,
            param_init={"weight": partial(nn.init.normal_, std=_INIT_STD)},
        ),
        lm_head=Linear.Config(
            in_features=shape.dim, out_features=shape.vocab_size, param_init=_LINEAR_INIT
        ),
        layers=[_block(shape) for _ in range(shape.n_layers)],
    )


def build_titan_model(shape: ModelShape, seed: int | None = None) -> Qwen3Model:
    """A TorchTitan Qwen3 model in fp32 on CPU; initialised from `seed` when given."""
    config = titan_config(shape)
    model = config.build()
    if seed is not None:
        torch.manual_seed(seed)
    model.init_states()
    return model


def state_dict_adapter(shape: ModelShape) -> Qwen3StateDictAdapter:
    """TorchTitan's own HF <-> TorchTitan name converter for this shape."""
    return Qwen3StateDictAdapter(titan_config(shape), None)
