"""How often a run saves itself, how many saves it keeps, and how long a stop waits to save."""

from dataclasses import dataclass

from forge_async.config.checks import AT_LEAST_0, AT_LEAST_1, check_range


@dataclass
class CheckpointConfig:
    every_steps: int = 50  # a whole-run checkpoint every this many steps (and at the end); 0 = off
    keep: int = 2  # newest complete checkpoints kept; older ones are deleted
    # Ctrl-C / SIGTERM: the step in flight gets at most this long to finish (then it is
    # abandoned), before the run saves what its last completed step allows and exits.
    stop_grace_s: float = 20.0

    def __post_init__(self) -> None:
        check_range("checkpoint.every_steps", self.every_steps, AT_LEAST_0, note="0 = off")
        check_range("checkpoint.keep", self.keep, AT_LEAST_1)
        check_range("checkpoint.stop_grace_s", self.stop_grace_s, AT_LEAST_0)

    @property
    def enabled(self) -> bool:
        return self.every_steps > 0
