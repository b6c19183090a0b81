"""A Hugging Face config.json's network shape, parsed without torch or TorchTitan.

Everything that only needs to know what a checkpoint is (the generator, the
controller, the config checks) reads this, so it does not pay for importing
TorchTitan (seconds per process at start-up).
"""

from dataclasses import dataclass
from typing import Any

from forge_async.errors import UserError

SUPPORTED_ARCHITECTURES = ("Qwen3ForCausalLM",)


class UnsupportedModelError(UserError):
    """The checkpoint's architecture or settings have no TorchTitan mapping here."""


@dataclass(frozen=True)
class ModelShape:
    """The fields of a Hugging Face Qwen3 config.json that define the network."""

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

    @classmethod
    def from_hf_config(cls, hf: dict[str, Any], source: str) -> "ModelShape":
        architectures = hf.get("architectures") or [hf.get("model_type", "unknown")]
        if architectures[0] not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"{source}: architecture {architectures[0]!r} is not supported; "
                f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        rope = hf.get("rope_parameters") or {}
        rope_type = rope.get("rope_type", "default")
        if rope_type != "default" or hf.get("rope_scaling"):
            raise UnsupportedModelError(f"{source}: RoPE scaling {rope_type!r} is not supported")
        n_heads = hf["num_attention_heads"]
        return cls(
            vocab_size=hf["vocab_size"],
            dim=hf["hidden_size"],
            n_layers=hf["num_hidden_layers"],
            n_heads=n_heads,
            n_kv_heads=hf.get("num_key_value_heads") or n_heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // n_heads,
            ffn_dim=hf["intermediate_size"],
            norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", hf.get("rope_theta", 10000.0)),
            max_seq_len=hf["max_position_embeddings"],
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        )
