"""A Hugging Face config.json's network shape, parsed without torch or TorchTitan.

Everything that only needs to know what a checkpoint is (the generator, the
controller, the config checks) reads this, so it does not pay for importing
TorchTitan (seconds per process at start-up).
"""

from dataclasses import dataclass
from typing import Any, Literal, get_args

from forge_async.errors import UserError

# The model families this library maps onto TorchTitan, and the HF architecture of each.
ModelFamily = Literal["qwen3", "llama", "qwen3_moe"]
MODEL_FAMILIES: tuple[ModelFamily, ...] = get_args(ModelFamily)
FAMILY_OF_ARCHITECTURE: dict[str, ModelFamily] = {
    "Qwen3ForCausalLM": "qwen3",
    "LlamaForCausalLM": "llama",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}
SUPPORTED_ARCHITECTURES = tuple(FAMILY_OF_ARCHITECTURE)
# HF rope types per family: TorchTitan's Llama 3 RoPE implements Llama 3.1's frequency
# scaling ("llama3"); its Qwen3 RoPE (cos/sin) implements none.
ROPE_TYPES = {"qwen3": ("default",), "llama": ("default", "llama3"), "qwen3_moe": ("default",)}
# The most experts a layer may have: a token's routes travel as uint8, UNKNOWN_ROUTE (255)
# marking a route the generator did not record.
MAX_EXPERTS = 255
UNKNOWN_ROUTE = 255
_LLAMA3_ROPE_FIELDS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


class UnsupportedModelError(UserError):
    """The checkpoint's architecture or settings have no TorchTitan mapping here."""


@dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama 3.1's RoPE frequency scaling (HF rope_type "llama3")."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclass(frozen=True)
class MoeShape:
    """A Mixture-of-Experts block's settings (Qwen3-MoE's config.json keys in comments).

    Every layer is sparse (decoder_sparse_step 1, no mlp_only_layers), with no shared
    expert and no expert bias: each token goes to its `top_k` highest softmax scores,
    weighted by those scores (renormalised over the k when `norm_topk_prob`)."""

    num_experts: int  # num_experts
    top_k: int  # num_experts_per_tok
    ffn_dim: int  # moe_intermediate_size: each expert's hidden size
    norm_topk_prob: bool


@dataclass(frozen=True)
class ModelShape:
    """The fields of a Hugging Face config.json (Qwen3 or Llama) that define the network."""

    family: ModelFamily
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    norm_eps: float
    rope_theta: float
    max_seq_len: int
    tie_embeddings: bool
    rope_scaling: Llama3RopeScaling | None = None
    moe: MoeShape | None = None  # None: a dense model

    @property
    def token_cost_in_attention_pairs(self) -> float:
        """FLOPs of one token through a layer's linear projections over those of one query-key
        pair of its attention (scores and weighted values): what packing trades (data/batch.py)."""
        q, kv = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        ffn = self.ffn_dim if self.moe is None else self.moe.top_k * self.moe.ffn_dim
        linear = self.dim * (2 * q + 2 * kv) + 3 * self.dim * ffn  # weights: 2 FLOPs each
        return 2 * linear / (4 * q)

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any], source: str) -> "ModelShape":
        family = _family(hf, source)
        rope = _rope_settings(hf)
        n_heads = hf["num_attention_heads"]
        return cls(
            family=family,
            vocab_size=hf["vocab_size"],
            dim=hf["hidden_size"],
            n_layers=hf["num_hidden_layers"],
            n_heads=n_heads,
            n_kv_heads=hf.get("num_key_value_heads") or n_heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // n_heads,
            ffn_dim=hf["intermediate_size"],
            norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", 10000.0),
            max_seq_len=hf["max_position_embeddings"],
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
            rope_scaling=_rope_scaling(rope, family, source),
            moe=_moe_shape(hf, source) if family == "qwen3_moe" else None,
        )

    def kv_cache_bytes_per_token(self, dtype_bytes: int) -> int:
        """What one token's keys and values take in an inference engine's KV cache."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * dtype_bytes


def _family(hf: dict[str, Any], source: str) -> ModelFamily:
    architectures = hf.get("architectures") or [hf.get("model_type", "unknown")]
    family = FAMILY_OF_ARCHITECTURE.get(architectures[0])
    if family is None:
        raise UnsupportedModelError(
            f"{source}: architecture {architectures[0]!r} is not supported; "
            f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    biased = [key for key in ("attention_bias", "mlp_bias") if hf.get(key)]
    if biased:
        raise UnsupportedModelError(f"{source}: {', '.join(biased)}=true is not supported (no bias terms)")
    return family


def _moe_shape(hf: dict[str, Any], source: str) -> MoeShape:
    """The MoE settings of a Qwen3-MoE config.json; the layouts TorchTitan's Qwen3 MoE cannot
    express (dense layers between sparse ones) are named."""
    if hf.get("decoder_sparse_step", 1) != 1 or hf.get("mlp_only_layers"):
        raise UnsupportedModelError(
            f"{source}: decoder_sparse_step={hf.get('decoder_sparse_step', 1)}, "
            f"mlp_only_layers={hf.get('mlp_only_layers')}: only models whose every layer is sparse "
            "(decoder_sparse_step=1, mlp_only_layers=[]) are supported"
        )
    shape = MoeShape(
        # config.json files written by transformers 5 say num_local_experts
        num_experts=hf.get("num_experts") or hf["num_local_experts"],
        top_k=hf["num_experts_per_tok"],
        ffn_dim=hf["moe_intermediate_size"],
        norm_topk_prob=bool(hf.get("norm_topk_prob", False)),
    )
    if not 1 <= shape.top_k <= shape.num_experts <= MAX_EXPERTS:
        raise UnsupportedModelError(
            f"{source}: num_experts={shape.num_experts}, num_experts_per_tok={shape.top_k}: "
            f"need 1 <= num_experts_per_tok <= num_experts <= {MAX_EXPERTS}"
        )
    return shape


def _rope_settings(hf: dict[str, Any]) -> dict[str, Any]:
    """RoPE settings from `rope_parameters` (transformers >= 5), or from `rope_scaling` and a
    top-level `rope_theta` (config.json files written by older transformers)."""
    legacy = {**(hf.get("rope_scaling") or {})}
    if "rope_theta" in hf:
        legacy["rope_theta"] = hf["rope_theta"]
    return {**legacy, **(hf.get("rope_parameters") or {})}


def _rope_scaling(rope: dict[str, Any], family: str, source: str) -> Llama3RopeScaling | None:
    rope_type = rope.get("rope_type") or rope.get("type") or "default"
    if rope_type not in ROPE_TYPES[family]:
        raise UnsupportedModelError(
            f"{source}: RoPE type {rope_type!r} is not supported for {family} models; "
            f"supported: {', '.join(ROPE_TYPES[family])}"
        )
    if rope_type == "default":
        return None
    missing = [name for name in _LLAMA3_ROPE_FIELDS if name not in rope]
    if missing:
        raise UnsupportedModelError(f"{source}: RoPE type 'llama3' without {', '.join(missing)}")
    return Llama3RopeScaling(
        factor=float(rope["factor"]),
        low_freq_factor=float(rope["low_freq_factor"]),
        high_freq_factor=float(rope["high_freq_factor"]),
        original_max_position_embeddings=int(rope["original_max_position_embeddings"]),
    )
