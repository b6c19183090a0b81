"""The observability config sections: logging.* (metric sinks besides metrics.jsonl) and trace.*."""

from dataclasses import dataclass

from forge_async.errors import ConfigError

WANDB_MODES = ("offline", "online")


@dataclass
class LoggingConfig:
    tensorboard: bool = False  # event files in RUN_DIR/tensorboard
    wandb: str | None = None  # offline | online; null = off. Files in RUN_DIR/wandb
    wandb_project: str = "forge_async"

    def __post_init__(self) -> None:
        if self.wandb is not None and self.wandb not in WANDB_MODES:
            raise ConfigError(f"logging.wandb={self.wandb!r}: one of {', '.join(WANDB_MODES)}, or null")


@dataclass
class TraceConfig:
    enabled: bool = True  # spans of every actor -> RUN_DIR/trace.json (cheap enough to stay on)
