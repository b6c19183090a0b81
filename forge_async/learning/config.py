"""The trainer's config section (light: read before torch is imported)."""

from dataclasses import dataclass

from forge_async.errors import ConfigError
from forge_async.config.checks import AT_LEAST_0, AT_LEAST_1, POSITIVE, Range, check_choice, check_range

DTYPES = ("float32", "bfloat16")
ACTIVATION_CHECKPOINTING = ("none", "full", "selective")
# TorchTitan's warmup-then-decay schedules (components/optimizer/lr_scheduler.py); constant = no decay.
LR_SCHEDULES = ("constant", "linear", "cosine", "sqrt")


@dataclass
class TrainerConfig:
    procs: int = 1
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    threads: int = 1  # torch intra-op threads per trainer proc
    # Compute dtype. bfloat16: FSDP2 mixed precision (bf16 forward/backward, fp32 master
    # weights, optimizer state and gradient reduction).
    dtype: str = "float32"
    # Token budget of one forward/backward (rows x padded length); the step accumulates
    # gradients over as many micro-batches as it needs. null = the whole batch at once.
    micro_batch_tokens: int | None = None
    # One forward row per prompt: the responses that share it follow it, each attending to the
    # prompt and itself (data/batch.py). false: one row per sequence, the prompt computed for each.
    share_prompts: bool = True
    activation_checkpointing: str = "none"  # none | full | selective (recompute in backward)
    lr_schedule: str = "constant"  # constant | linear | cosine | sqrt decay to lr * min_lr_factor
    warmup_steps: int = 0  # linear warmup from lr / warmup_steps to lr
    min_lr_factor: float = 0.0  # where the decay ends, as a fraction of lr
    lr_total_steps: int | None = None  # steps the warmup + decay spans; null = the run's `steps`
    # The decay's share of lr_total_steps, at the end (warmup-stable-decay); null: it starts after the warmup
    decay_ratio: float | None = None
    compile: bool = False  # torch.compile each transformer block (meant for GPU)
    # Mixture-of-Experts models: each MoE layer's experts split across this many ranks, tokens sent
    # to their experts by all-to-all; the experts FSDP-sharded over the ranks left (1 = off).
    expert_parallel: int = 1

    def __post_init__(self) -> None:
        check_range("trainer.procs", self.procs, AT_LEAST_1)
        check_range("trainer.lr", self.lr, POSITIVE)
        check_range("trainer.beta1", self.beta1, Range(0, 1, high_open=True))
        check_range("trainer.beta2", self.beta2, Range(0, 1, high_open=True))
        check_range("trainer.eps", self.eps, POSITIVE)
        check_range("trainer.weight_decay", self.weight_decay, AT_LEAST_0)
        check_range("trainer.grad_clip", self.grad_clip, POSITIVE)
        check_range("trainer.threads", self.threads, AT_LEAST_1)
        check_choice("trainer.dtype", self.dtype, DTYPES)
        check_range(
            "trainer.micro_batch_tokens", self.micro_batch_tokens, AT_LEAST_1,
            nullable=True, note="null = the whole batch in one forward",
        )
        check_choice("trainer.activation_checkpointing", self.activation_checkpointing, ACTIVATION_CHECKPOINTING)
        check_choice("trainer.lr_schedule", self.lr_schedule, LR_SCHEDULES)
        check_range("trainer.warmup_steps", self.warmup_steps, AT_LEAST_0)
        check_range("trainer.min_lr_factor", self.min_lr_factor, Range(0, 1))
        check_range("trainer.lr_total_steps", self.lr_total_steps, AT_LEAST_1, nullable=True, note="null = steps")
        check_range("trainer.decay_ratio", self.decay_ratio, Range(0, 1), nullable=True, note="null = all after the warmup")
        check_range("trainer.expert_parallel", self.expert_parallel, AT_LEAST_1)
        if self.procs % self.expert_parallel:
            raise ConfigError(
                f"trainer.expert_parallel={self.expert_parallel} must divide trainer.procs={self.procs}: "
                "the experts are split across that many ranks, and FSDP-sharded over the rest"
            )
