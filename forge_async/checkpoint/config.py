"""How often a run saves itself, and how many saves it keeps."""

from dataclasses import dataclass

from forge_async.errors import ConfigError


@dataclass
class CheckpointConfig:
    every_steps: int = 50  # a whole-run checkpoint every this many steps (and at the end); 0 = off
    keep: int = 2  # newest complete checkpoints kept; older ones are deleted

    def __post_init__(self) -> None:
        if self.every_steps < 0:
            raise ConfigError(f"checkpoint.every_steps={self.every_steps}: must be >= 0 (0 = off)")
        if self.keep < 1:
            raise ConfigError(f"checkpoint.keep={self.keep}: must be >= 1")

    @property
    def enabled(self) -> bool:
        return self.every_steps > 0
