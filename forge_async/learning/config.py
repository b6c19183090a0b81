"""The trainer's config section (light: read before torch is imported)."""

from dataclasses import dataclass
from typing import Literal

from forge_async.config.choices import check_choices
from forge_async.config.keys import key
from forge_async.errors import ConfigError
from forge_async.config.checks import AT_LEAST_0, AT_LEAST_1, POSITIVE, Range, check_range

# TorchTitan's warmup-then-decay schedules (components/optimizer/lr_scheduler.py); constant = no decay.
LrSchedule = Literal["constant", "linear", "cosine", "sqrt"]


@dataclass
class TrainerConfig:
    procs: int = key(
        1,
        help=(
            "FSDP2 ranks (procs); gloo on CPU, nccl on GPU. One float32 rank trains the plain TorchTitan "
            "module: FSDP2 over one rank shards nothing and its hooks cost ~20% of a CPU step "
            "([benchmarks.md](benchmarks.md#pipeline-how-busy-both-sides-are-benchmarkspipelinepipelinepy)); bf16 "
            "or more ranks go under FSDP2"
        ),
        accepts=">= 1",
    )
    lr: float = key(1e-3, help="AdamW learning rate", accepts="> 0")
    beta1: float = key(0.9, help="AdamW first-moment decay rate", accepts="in [0, 1)")
    beta2: float = key(0.99, help="AdamW second-moment decay rate", accepts="in [0, 1)")
    eps: float = key(1e-8, help="AdamW denominator epsilon", accepts="> 0")
    weight_decay: float = key(0.0, help="AdamW decoupled weight decay", accepts=">= 0")
    grad_clip: float = key(1.0, help="max gradient norm", accepts="> 0")
    threads: int = key(1, help="torch threads per trainer proc", accepts=">= 1")
    dtype: Literal["float32", "bfloat16"] = key(
        "float32",
        help=(
            "compute dtype. `bfloat16`: FSDP2 mixed precision: bf16 forward and backward, fp32 sharded "
            "master weights, optimizer state and gradient reduction; weights are published to the "
            "generators in bf16"
        ),
    )
    micro_batch_tokens: int | None = key(
        4096,
        help=(
            "token budget (rows x padded length) of one forward/backward. The step splits its batch into "
            "micro-batches of similar-length sequences (longest first) and accumulates gradients: the "
            "same update as one forward, with the peak memory of one micro-batch "
            "([benchmarks.md](benchmarks.md#trainer-memory-benchmarkscomponentstrainer_memorypy)). A row of "
            "responses that share a prompt (`trainer.share_prompts`) longer than the budget is cut into "
            "rows that each keep the prompt; a single sequence longer than the budget is a micro-batch of "
            "its own. null = the whole batch at once. On CPU the default's small micro-batches of like lengths "
            "train long-tailed completions 1.6x faster than the whole batch at once "
            "([benchmarks.md](benchmarks.md#long-tails-benchmarkspipelinelong_tailpy))"
        ),
        accepts=">= 1, or null",
    )
    share_prompts: bool = key(
        True,
        help=(
            "one forward row per prompt: the responses that share it (a GRPO group) follow it in the row, "
            "each attending to the prompt and its own earlier tokens under an explicit attention mask, at "
            "its own positions, so the prompt's tokens are computed once rather than once per response. "
            "Logprobs and gradients are those of separate rows (to float rounding). A response joins its "
            "prompt's row only while the prompt's linear-layer FLOPs it saves exceed the attention FLOPs "
            "the longer masked row adds (long responses behind a short prompt keep rows of their own). "
            "The CPU default's trainer step with and without it: "
            "[benchmarks.md](benchmarks.md#pipeline-how-busy-both-sides-are-benchmarkspipelinepipelinepy). "
            "false: one row per sequence, plain causal attention"
        ),
    )
    activation_checkpointing: Literal["none", "full", "selective"] = key(
        "none",
        help=(
            "recompute activations in the backward instead of keeping them (TorchTitan's `FullAC` / "
            "`SelectiveAC` per transformer block). On one H100: `selective` is slower than `full` in "
            "eager mode (its per-op dispatch mode costs CPU) and as fast compiled, and keeps more "
            "([benchmarks.md](benchmarks.md#the-trainer-on-one-gpu-benchmarkscomponentsgpu_trainerpy))"
        ),
    )
    lr_schedule: LrSchedule = key(
        "linear",
        help=(
            "TorchTitan's LR schedule: warmup, then decay to `lr * min_lr_factor` over the rest of "
            "`lr_total_steps` (TorchTitan keeps one step at full lr between the two); `constant` = warmup "
            "then `lr` for good"
        ),
        accepts="`constant`, `linear`, `cosine`, `sqrt`",
    )
    warmup_steps: int = key(
        0,
        help="linear warmup: step k (from 0) uses `lr * (k + 1) / warmup_steps`",
        accepts=">= 0",
    )
    min_lr_factor: float = key(
        0.1,
        help=(
            "where the decay ends, as a fraction of `lr`. The CPU default keeps `lr` for 200 steps, then "
            "decays to lr/10 over the last 200 of its 400: with a constant lr, late runs forgot answers "
            "they had "
            "([benchmarks.md](benchmarks.md#learning-reliability-benchmarkslearninglearning_reliabilitypy))"
        ),
        accepts="in [0, 1]",
    )
    lr_total_steps: int | None = key(
        None,
        help="steps the warmup + decay span; null = `steps`",
        accepts=">= 1 and >= `steps` unless `constant`, or null",
    )
    decay_ratio: float | None = key(
        0.5,
        help=(
            "TorchTitan's warmup-stable-decay: the decay spans this last share of `lr_total_steps`, the "
            "lr stays at `lr` before it; null = the decay starts right after the warmup"
        ),
        accepts="in [0, 1], or null",
    )
    compile: bool = key(
        False,
        help=(
            "`torch.compile` each transformer block (meant for GPU; not run in CI). Batches of new shapes "
            "recompile over the first steps, then shapes are dynamic. What it gives and costs on one GPU: "
            "[benchmarks.md](benchmarks.md#the-trainer-on-one-gpu-benchmarkscomponentsgpu_trainerpy)"
        ),
    )
    expert_parallel: int = key(
        1,
        help=(
            "Mixture-of-Experts models: each MoE layer's experts are split across this many ranks "
            "(TorchTitan's expert parallelism: each token goes to the rank holding its expert and back by "
            "all-to-all, gloo on CPU, nccl on GPU); the experts are FSDP-sharded over the `procs / "
            "expert_parallel` ranks that hold the same ones, the rest of the model over all ranks. A step "
            "computes what `1` does (to float rounding); before each push the experts are gathered whole "
            "on every rank (a full copy of them per rank for that moment). 1 = off; > 1 on a dense model "
            "is an error"
        ),
        accepts=">= 1, dividing `trainer.procs` and the model's `num_experts`",
    )

    def __post_init__(self) -> None:
        check_choices(self, "trainer")
        check_range("trainer.procs", self.procs, AT_LEAST_1)
        check_range("trainer.lr", self.lr, POSITIVE)
        check_range("trainer.beta1", self.beta1, Range(0, 1, high_open=True))
        check_range("trainer.beta2", self.beta2, Range(0, 1, high_open=True))
        check_range("trainer.eps", self.eps, POSITIVE)
        check_range("trainer.weight_decay", self.weight_decay, AT_LEAST_0)
        check_range("trainer.grad_clip", self.grad_clip, POSITIVE)
        check_range("trainer.threads", self.threads, AT_LEAST_1)
        check_range(
            "trainer.micro_batch_tokens",
            self.micro_batch_tokens,
            AT_LEAST_1,
            nullable=True,
            note="null = the whole batch in one forward",
        )
        check_range("trainer.warmup_steps", self.warmup_steps, AT_LEAST_0)
        check_range("trainer.min_lr_factor", self.min_lr_factor, Range(0, 1))
        check_range("trainer.lr_total_steps", self.lr_total_steps, AT_LEAST_1, nullable=True, note="null = steps")
        check_range(
            "trainer.decay_ratio", self.decay_ratio, Range(0, 1), nullable=True, note="null = all after the warmup"
        )
        check_range("trainer.expert_parallel", self.expert_parallel, AT_LEAST_1)
        if self.procs % self.expert_parallel:
            raise ConfigError(
                f"trainer.expert_parallel={self.expert_parallel} must divide trainer.procs={self.procs}: "
                "the experts are split across that many ranks, and FSDP-sharded over the rest"
            )
