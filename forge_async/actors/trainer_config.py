"""The trainer's config section (light: read before torch is imported)."""

from dataclasses import dataclass

from forge_async.config_checks import AT_LEAST_0, AT_LEAST_1, POSITIVE, Range, check_range


@dataclass
class TrainerConfig:
    procs: int = 1
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    # Truncated importance sampling cap c: token weight min(pi_theta / pi_behaviour, c).
    # 1.0 only ever down-weights; null turns the correction off. See docs/staleness.md.
    is_cap: float | None = 1.0
    threads: int = 1  # torch intra-op threads per trainer proc

    def __post_init__(self) -> None:
        check_range("trainer.procs", self.procs, AT_LEAST_1)
        check_range("trainer.lr", self.lr, POSITIVE)
        check_range("trainer.beta1", self.beta1, Range(0, 1, high_open=True))
        check_range("trainer.beta2", self.beta2, Range(0, 1, high_open=True))
        check_range("trainer.eps", self.eps, POSITIVE)
        check_range("trainer.weight_decay", self.weight_decay, AT_LEAST_0)
        check_range("trainer.grad_clip", self.grad_clip, POSITIVE)
        check_range("trainer.is_cap", self.is_cap, POSITIVE, nullable=True, note="null = no correction")
        check_range("trainer.threads", self.threads, AT_LEAST_1)
