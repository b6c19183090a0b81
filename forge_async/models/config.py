"""The model's config section (light: read before torch is imported)."""

from dataclasses import dataclass, field

from forge_async.config.checks import AT_LEAST_1, POSITIVE, Range, check_choice, check_range
from forge_async.errors import ConfigError
from forge_async.models.shape import MAX_EXPERTS, MODEL_FAMILIES


# model.tiny.tokenizer: the tiny model's tokenizer (models/tokenizer.py), and the context
# (max_seq_len) each gets when model.tiny.max_seq_len is null.
TINY_TOKENIZERS = ("digits", "bytes")
TINY_CONTEXT = {
    "digits": 64,  # digit prompts: <bos> digits <sep>
    "bytes": 512,  # text prompts of a few hundred UTF-8 bytes, chat markers and a short answer
}


@dataclass
class TinyModelConfig:
    """Shape of the tiny model. head_dim must be one vLLM's CPU attention supports (32, 64, ...).

    family: "qwen3" (Qwen3ForCausalLM), "llama" (LlamaForCausalLM, Llama 3.1 RoPE scaling) or
    "qwen3_moe" (Qwen3MoeForCausalLM: every layer's MLP is `num_experts` experts of `moe_ffn_dim`,
    `top_k` per token; ffn_dim is then unused).
    tokenizer: "digits" (14 tokens: the digit tasks) or "bytes" (any text, one token per UTF-8
    byte, with chat role markers); the vocabulary follows it.
    max_seq_len: the context; null (None) = the tokenizer's (TINY_CONTEXT), set in __post_init__.
    """

    family: str = "qwen3"
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 2
    head_dim: int = 32
    ffn_dim: int = 256
    max_seq_len: int | None = None
    seed: int = 0
    tokenizer: str = "digits"
    num_experts: int = 8
    top_k: int = 2
    moe_ffn_dim: int = 64

    def __post_init__(self) -> None:
        check_choice("model.tiny.family", self.family, MODEL_FAMILIES)
        check_choice("model.tiny.tokenizer", self.tokenizer, TINY_TOKENIZERS)
        if self.max_seq_len is None:
            self.max_seq_len = TINY_CONTEXT[self.tokenizer]
        for name in ("dim", "n_layers", "n_heads", "head_dim", "ffn_dim", "max_seq_len", "moe_ffn_dim"):
            check_range(f"model.tiny.{name}", getattr(self, name), AT_LEAST_1)
        check_range("model.tiny.num_experts", self.num_experts, Range(1, MAX_EXPERTS))
        check_range("model.tiny.top_k", self.top_k, Range(1, self.num_experts), note="at most model.tiny.num_experts")
        if self.head_dim % 2:
            raise ConfigError(f"model.tiny.head_dim={self.head_dim}: must be even (RoPE rotates pairs)")


# The linear layers LoRA can adapt, by their Hugging Face module names (what PEFT and vLLM
# call them): the attention and MLP projections of every transformer block.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
DENSE_MLP_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")  # none in a Mixture-of-Experts model
MAX_LORA_RANK = 512  # the largest adapter rank vLLM serves


@dataclass
class LoraConfig:
    """Low-rank adapters on the `targets` layers: W x + (alpha / rank) B A x, base weights frozen.

    rank: null = LoRA off (full fine-tuning); otherwise the adapters' rank, >= 1.
    """

    rank: int | None = None
    alpha: float = 16.0
    targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS))

    def __post_init__(self) -> None:
        check_range(
            "model.lora.rank", self.rank, Range(1, MAX_LORA_RANK), nullable=True,
            note="null = LoRA off; vLLM serves ranks up to 512",
        )
        check_range("model.lora.alpha", self.alpha, POSITIVE)
        if not self.targets:
            raise ConfigError(f"model.lora.targets is empty: name some of {', '.join(LORA_TARGETS)}")
        for target in self.targets:
            check_choice("model.lora.targets", target, LORA_TARGETS)
        if ("k_proj" in self.targets) != ("v_proj" in self.targets):
            # TorchTitan builds both from one module config, which LoRA converts as a whole.
            raise ConfigError(f"model.lora.targets={self.targets}: k_proj and v_proj are adapted together; name both or neither")

    @property
    def enabled(self) -> bool:
        return self.rank is not None

    @property
    def scale(self) -> float:
        """The adapter product's factor in the forward: alpha / rank."""
        return self.alpha / self.rank


ROUTING_REPLAY = ("off", "rollout")


@dataclass
class MoeConfig:
    """Mixture-of-Experts training (docs/moe.md).

    routing_replay: "off" (the trainer's routers choose their own experts) or "rollout" (each
    token goes to the experts the generator routed it to; their weights are still the trainer's
    gate scores). Either way the generator records the routes and the mismatch is logged.
    """

    routing_replay: str = "off"

    def __post_init__(self) -> None:
        check_choice("moe.routing_replay", self.routing_replay, ROUTING_REPLAY)

    @property
    def replay(self) -> bool:
        return self.routing_replay == "rollout"


@dataclass
class ModelConfig:
    # A local Hugging Face checkpoint directory; null = create the tiny model in the run dir.
    path: str | None = None
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
