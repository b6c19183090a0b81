"""The model's config section (light: read before torch is imported)."""

from dataclasses import dataclass, field

from forge_async.config_checks import AT_LEAST_1, check_choice, check_range
from forge_async.errors import ConfigError
from forge_async.models.shape import MODEL_FAMILIES


@dataclass
class TinyModelConfig:
    """Shape of the tiny model. head_dim must be one vLLM's CPU attention supports (32, 64, ...).

    family: "qwen3" (Qwen3ForCausalLM) or "llama" (LlamaForCausalLM, Llama 3.1 RoPE scaling).
    """

    family: str = "qwen3"
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 2
    head_dim: int = 32
    ffn_dim: int = 256
    max_seq_len: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        check_choice("model.tiny.family", self.family, MODEL_FAMILIES)
        for name in ("dim", "n_layers", "n_heads", "head_dim", "ffn_dim", "max_seq_len"):
            check_range(f"model.tiny.{name}", getattr(self, name), AT_LEAST_1)
        if self.head_dim % 2:
            raise ConfigError(f"model.tiny.head_dim={self.head_dim}: must be even (RoPE rotates pairs)")


@dataclass
class ModelConfig:
    # A local Hugging Face checkpoint directory; null = create the tiny model in the run dir.
    path: str | None = None
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
