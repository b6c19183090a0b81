"""The observability config sections: logging.* (metric sinks besides metrics.jsonl) and trace.*."""

from dataclasses import dataclass
from typing import Literal

from forge_async.config.choices import check_choices
from forge_async.config.keys import key

WandbMode = Literal["offline", "online"]


@dataclass
class LoggingConfig:
    tensorboard: bool = key(False, help="TensorBoard event files in `RUN_DIR/tensorboard`", resumable=True)
    wandb: WandbMode | None = key(
        None,
        help="Weights & Biases, files in `RUN_DIR/wandb`; null = off",
        resumable=True,
    )
    wandb_project: str = key("forge_async", help="W&B project name", accepts="a name", resumable=True)

    def __post_init__(self) -> None:
        check_choices(self, "logging")


@dataclass
class TraceConfig:
    enabled: bool = key(
        True,
        help=(
            "every actor's spans -> `RUN_DIR/trace.json` (Perfetto / chrome://tracing); `python -m "
            "forge_async.observability.step_budget RUN_DIR` prints the per-step budget "
            "([metrics.md](metrics.md#timeline-tracejson))"
        ),
        resumable=True,
    )
