"""How often a run saves itself, how many saves it keeps, and how long a stop waits to save."""

from dataclasses import dataclass

from forge_async.config.keys import key
from forge_async.config.checks import AT_LEAST_0, AT_LEAST_1, check_range


@dataclass
class CheckpointConfig:
    every_steps: int = key(
        50,
        help="whole-run checkpoint every N steps and at the end; 0 = off",
        accepts=">= 0",
        resumable=True,
    )
    keep: int = key(2, help="newest complete checkpoints kept", accepts=">= 1", resumable=True)
    stop_grace_s: float = key(
        20.0,
        help=(
            "Ctrl-C / SIGTERM: the step in flight gets at most this long to finish (then it is abandoned, "
            "and said so in `summary.json`'s `cut_short`); the run then saves what its last completed "
            "step allows and exits ([checkpoints.md](checkpoints.md#interrupts-ctrl-c-sigterm))"
        ),
        accepts=">= 0",
        resumable=True,
    )

    def __post_init__(self) -> None:
        check_range("checkpoint.every_steps", self.every_steps, AT_LEAST_0, note="0 = off")
        check_range("checkpoint.keep", self.keep, AT_LEAST_1)
        check_range("checkpoint.stop_grace_s", self.stop_grace_s, AT_LEAST_0)

    @property
    def enabled(self) -> bool:
        return self.every_steps > 0
