"""The model's config section (light: read before torch is imported)."""

from dataclasses import dataclass, field
from typing import Literal, get_args

from forge_async.config.choices import check_choices
from forge_async.config.keys import key
from forge_async.config.checks import AT_LEAST_1, POSITIVE, Range, check_range
from forge_async.errors import ConfigError
from forge_async.models.shape import MAX_EXPERTS, ModelFamily


# model.tiny.tokenizer: the tiny model's tokenizer (models/tokenizer.py), and the context
# (max_seq_len) each gets when model.tiny.max_seq_len is null.
TinyTokenizer = Literal["digits", "bytes"]
TINY_TOKENIZERS: tuple[TinyTokenizer, ...] = get_args(TinyTokenizer)
TINY_CONTEXT: dict[TinyTokenizer, int] = {
    "digits": 64,  # digit prompts: <bos> digits <sep>
    "bytes": 512,  # text prompts of a few hundred UTF-8 bytes, chat markers and a short answer
}


@dataclass
class TinyModelConfig:
    """model.tiny: the model a run creates when model.path is null (models/tiny.py)."""

    family: ModelFamily = key(
        "qwen3",
        help=(
            "architecture of the tiny model: `Qwen3ForCausalLM`, `LlamaForCausalLM` with Llama 3.1 RoPE "
            "scaling (`rope_type: llama3`, shrunk to the tiny context), or `Qwen3MoeForCausalLM` (every "
            "layer's MLP a Mixture of Experts, [moe.md](moe.md))"
        ),
    )
    dim: int = key(64, help="model width: the hidden size of every layer", accepts=">= 1")
    n_layers: int = key(2, help="transformer blocks", accepts=">= 1")
    n_heads: int = key(2, help="attention heads per block", accepts=">= 1")
    head_dim: int = key(
        32,
        help="per-head dimension",
        accepts=(
            "even (RoPE), >= 2; on CPU also a size vLLM's CPU attention supports (32, 64, 80, 96, ...; "
            "vLLM checks it when the generator starts)"
        ),
    )
    ffn_dim: int = key(256, help="the MLP's hidden size (dense families)", accepts=">= 1")
    max_seq_len: int | None = key(
        None,
        help=(
            "the tiny model's context (`max_position_embeddings`; `generator.max_model_len` follows it "
            "unless set); null: the tokenizer's, 64 for `digits`, 512 for `bytes` (with the default "
            "`sampling.max_tokens` of 3, a prompt may hold 506 bytes of message text besides its markers)"
        ),
        accepts=">= 1, or null",
    )
    seed: int = key(0, help="init seed of the tiny model")
    tokenizer: TinyTokenizer = key(
        "digits",
        help=(
            "the tiny model's tokenizer, its vocabulary the model's (`forge_async/models/tokenizer.py`). "
            "`digits`: 14 tokens, digits 0-9, `<pad>` `<bos>` `<eos>` `<sep>`: the digit tasks, nothing "
            "else encodes. `bytes`: any text, one token per UTF-8 byte (id = byte value) + `<pad>` "
            "`<bos>` `<eos>` and the role markers `<|system|>` `<|user|>` `<|assistant|>` `<|tool|>` (263 "
            "tokens), with a chat template `<bos><|system|>...<|user|>...<|assistant|>`: text prompts "
            "(datasets, reasoning-gym) on the CPU default ([tasks.md](tasks.md#text-tokenizer))"
        ),
    )
    num_experts: int = key(
        8,
        help="`qwen3_moe` only: experts per layer (`ffn_dim` is then unused)",
        accepts="1-255",
    )
    top_k: int = key(
        2,
        help="`qwen3_moe` only: experts per token, their weights renormalised (`norm_topk_prob`)",
        accepts="1 to `num_experts`",
    )
    moe_ffn_dim: int = key(64, help="`qwen3_moe` only: each expert's hidden size", accepts=">= 1")

    def __post_init__(self) -> None:
        check_choices(self, "model.tiny")
        if self.max_seq_len is None:
            self.max_seq_len = TINY_CONTEXT[self.tokenizer]
        for name in ("dim", "n_layers", "n_heads", "head_dim", "ffn_dim", "max_seq_len", "moe_ffn_dim"):
            check_range(f"model.tiny.{name}", getattr(self, name), AT_LEAST_1)
        check_range("model.tiny.num_experts", self.num_experts, Range(1, MAX_EXPERTS))
        check_range("model.tiny.top_k", self.top_k, Range(1, self.num_experts), note="at most model.tiny.num_experts")
        if self.head_dim % 2:
            raise ConfigError(f"model.tiny.head_dim={self.head_dim}: must be even (RoPE rotates pairs)")

    @property
    def context(self) -> int:
        """`max_seq_len`, the tokenizer's context where it is null."""
        return TINY_CONTEXT[self.tokenizer] if self.max_seq_len is None else self.max_seq_len


# The linear layers LoRA can adapt, by their Hugging Face module names (what PEFT and vLLM
# call them): the attention and MLP projections of every transformer block.
LoraTarget = Literal["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA_TARGETS: tuple[LoraTarget, ...] = get_args(LoraTarget)
# none in a Mixture-of-Experts model
DENSE_MLP_PROJECTIONS: tuple[LoraTarget, ...] = ("gate_proj", "up_proj", "down_proj")
MAX_LORA_RANK = 512  # the largest adapter rank vLLM serves


@dataclass
class LoraConfig:
    """Low-rank adapters on the `targets` layers: W x + (alpha / rank) B A x, base weights frozen."""

    rank: int | None = key(
        None,
        help=(
            "null: LoRA off (every weight trains). A number: LoRA adapters of that rank on "
            "`model.lora.targets`, base weights frozen, only adapters trained and synced "
            '([lora.md](lora.md)). 0 or negative is an error, not "off"'
        ),
        accepts="1-512, or null",
    )
    alpha: float = key(
        16.0,
        help="the adapter product is scaled by `alpha / rank` (PEFT's `lora_alpha`)",
        accepts="> 0",
    )
    targets: list[LoraTarget] = key(
        list(LORA_TARGETS),
        help=(
            "the linear layers (Hugging Face module names) that get adapters, in every block; `k_proj` "
            "and `v_proj` only together (TorchTitan builds both from one module config). A "
            "Mixture-of-Experts model has no dense MLP: the attention projections only "
            "([moe.md](moe.md#lora))"
        ),
    )

    def __post_init__(self) -> None:
        check_range(
            "model.lora.rank",
            self.rank,
            Range(1, MAX_LORA_RANK),
            nullable=True,
            note="null = LoRA off; vLLM serves ranks up to 512",
        )
        check_range("model.lora.alpha", self.alpha, POSITIVE)
        if not self.targets:
            raise ConfigError(f"model.lora.targets is empty: name some of {', '.join(LORA_TARGETS)}")
        check_choices(self, "model.lora")
        if ("k_proj" in self.targets) != ("v_proj" in self.targets):
            # TorchTitan builds both from one module config, which LoRA converts as a whole.
            raise ConfigError(
                f"model.lora.targets={self.targets}: k_proj and v_proj are adapted together; name both or neither"
            )

    @property
    def enabled(self) -> bool:
        return self.rank is not None

    @property
    def adapter_rank(self) -> int:
        """`rank`, for code that runs only with LoRA on: a RuntimeError when it is off (rank null)."""
        if self.rank is None:
            raise RuntimeError("model.lora.rank is null (LoRA off): there are no adapters")
        return self.rank

    @property
    def scale(self) -> float:
        """The adapter product's factor in the forward: alpha / rank."""
        return self.alpha / self.adapter_rank


@dataclass
class MoeConfig:
    """Mixture-of-Experts training (docs/moe.md)."""

    routing_replay: Literal["off", "rollout"] = key(
        "off",
        help=(
            "Mixture-of-Experts models: `rollout` routes each token in the trainer to the experts the "
            "generator routed it to, weighted by the trainer's own gate ([moe.md](moe.md)); `rollout` on "
            "a dense model is an error"
        ),
    )

    def __post_init__(self) -> None:
        check_choices(self, "moe")

    @property
    def replay(self) -> bool:
        return self.routing_replay == "rollout"


@dataclass
class ModelConfig:
    path: str | None = key(
        None,
        help=(
            "local Hugging Face checkpoint, `Qwen3ForCausalLM`, `Qwen3MoeForCausalLM` or "
            "`LlamaForCausalLM` (see [Supported models](#supported-models)); null: create the tiny model "
            "below in the run dir"
        ),
        accepts="a directory, or null",
    )
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
