"""How weights travel from the trainer to the generators."""

import dataclasses
import os
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from forge_async.config_checks import check_choice

TRANSPORTS = ("shm", "torchstore")


def default_root() -> Path:
    """/dev/shm where it can be written (memory), else the temporary directory."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


@dataclass
class WeightsConfig:
    # shm: same-host shared-memory files (memory speed; generators pick up new
    #      versions by themselves between engine steps).
    # torchstore: per-tensor puts/gets over Monarch RPC (works across hosts; a
    #      generator loads a version when told to, between generate calls).
    transport: str = "shm"
    # Directory of the shared-memory channel; null = a fresh one under /dev/shm per run.
    channel_dir: str | None = None

    def __post_init__(self) -> None:
        check_choice("weights.transport", self.transport, TRANSPORTS)

    def resolved(self) -> "WeightsConfig":
        """This config with a channel directory chosen (a fresh one when none is set)."""
        if self.channel_dir is not None:
            return self
        fresh = default_root() / f"forge_async-{uuid.uuid4().hex[:12]}"
        return dataclasses.replace(self, channel_dir=str(fresh))
