"""Where per-step metrics go besides metrics.jsonl: TensorBoard and Weights & Biases.

Both are optional (`logging.tensorboard`, `logging.wandb`) and write into the run
dir, so a resumed run continues the same curves: TensorBoard drops events past the
checkpoint's step, W&B reattaches to the run id saved in the run dir.
"""

import secrets
from pathlib import Path
from typing import Protocol

from forge_async.observability.config import LoggingConfig, WandbMode


class MetricSink(Protocol):
    def write(self, step: int, scalars: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class TensorBoardSink:
    def __init__(self, run_dir: Path, resume_after_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        purge = None if resume_after_step is None else resume_after_step + 1
        # Written out every few seconds (and at close), not on every step's critical path.
        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"), purge_step=purge, flush_secs=5)

    def write(self, step: int, scalars: dict[str, float]) -> None:
        for name, value in scalars.items():
            self.writer.add_scalar(name, value, step)

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """A W&B run whose id is kept in RUN_DIR/wandb_id, so a resumed run logs into it."""

    def __init__(self, run_dir: Path, mode: WandbMode, project: str, config: dict):
        import wandb

        id_file = run_dir / "wandb_id"
        if not id_file.exists():
            id_file.write_text(secrets.token_hex(4))
        self.run = wandb.init(
            project=project,
            id=id_file.read_text().strip(),
            resume="allow",
            dir=str(run_dir),
            mode=mode,
            config=config,
            name=run_dir.name,
            settings=wandb.Settings(silent=True, console="off"),
        )

    def write(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


def build_sinks(
    config: LoggingConfig, run_dir: Path, run_config: dict, resume_after_step: int | None
) -> list[MetricSink]:
    sinks: list[MetricSink] = []
    if config.tensorboard:
        sinks.append(TensorBoardSink(run_dir, resume_after_step))
    if config.wandb is not None:
        sinks.append(WandbSink(run_dir, config.wandb, config.wandb_project, run_config))
    return sinks
