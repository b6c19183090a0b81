"""How often a run saves itself, and how many saves it keeps."""

from dataclasses import dataclass

from forge_async.config_checks import AT_LEAST_0, AT_LEAST_1, check_range


@dataclass
class CheckpointConfig:
    every_steps: int = 50  # a whole-run checkpoint every this many steps (and at the end); 0 = off
    keep: int = 2  # newest complete checkpoints kept; older ones are deleted

    def __post_init__(self) -> None:
        check_range("checkpoint.every_steps", self.every_steps, AT_LEAST_0, note="0 = off")
        check_range("checkpoint.keep", self.keep, AT_LEAST_1)

    @property
    def enabled(self) -> bool:
        return self.every_steps > 0
