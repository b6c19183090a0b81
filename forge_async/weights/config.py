"""How weights travel from the trainer to the generators."""

import dataclasses
import os
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from forge_async.config.checks import POSITIVE, check_choice, check_range

TRANSPORTS = ("shm", "torchstore")
CROSS_HOST = ("gloo", "torchstore")


def default_root() -> Path:
    """/dev/shm where it can be written (memory), else the temporary directory."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


@dataclass
class WeightsConfig:
    # shm: same-host shared-memory files (memory speed; generators pick up new
    #      versions by themselves between engine steps).
    # torchstore: per-tensor puts/gets over Monarch RPC (works across hosts; a
    #      generator loads a version when told to, under generator.swap_mode).
    transport: str = "shm"
    # Directory of the shared-memory channel; null = a fresh one under /dev/shm per run.
    channel_dir: str | None = None
    # How a version reaches the relay of each generator host other than the trainer's
    # (transport=shm): gloo (a weight sender on the trainer's host sends the trainer's
    # channel to each relay over a gloo pair, off the trainer's path; the trainer on one
    # host) or torchstore (the trainer puts its shards into the store, each relay gets them).
    cross_host: str = "gloo"
    # A gloo send or receive that makes no progress for this long fails: that host keeps
    # the version it has, the failure is reported, and the next version reconnects.
    link_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        check_choice("weights.transport", self.transport, TRANSPORTS)
        check_choice("weights.cross_host", self.cross_host, CROSS_HOST)
        check_range("weights.link_timeout_s", self.link_timeout_s, POSITIVE)

    def resolved(self) -> "WeightsConfig":
        """This config with a channel directory chosen (a fresh one when none is set)."""
        if self.channel_dir is not None:
            return self
        fresh = default_root() / f"forge_async-{uuid.uuid4().hex[:12]}"
        return dataclasses.replace(self, channel_dir=str(fresh))
