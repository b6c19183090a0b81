"""How weights travel from the trainer to the generators."""

import dataclasses
import os
import tempfile
import uuid
from dataclasses import dataclass
from typing import Literal
from pathlib import Path

from forge_async.config.choices import check_choices
from forge_async.config.keys import key
from forge_async.config.checks import POSITIVE, check_range


def default_root() -> Path:
    """/dev/shm where it can be written (memory), else the temporary directory."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


@dataclass
class WeightsConfig:
    transport: Literal["shm", "torchstore"] = key(
        "shm",
        help=(
            "`shm`: shared-memory files on this host, generators pick new versions up by themselves; "
            "`torchstore`: per-tensor RPC through torchstore, generators load when told"
        ),
        resumable=True,
    )
    channel_dir: str | None = key(
        None,
        help=(
            "the run's scratch directory on each host (shared-memory weight channel, LoRA adapter files, "
            "vLLM's temporary files); null: a fresh `forge_async-<id>` under `/dev/shm`, removed at the "
            "end, or by the next run if the controller was killed "
            "([checkpoints.md](checkpoints.md#nothing-left-behind))"
        ),
        accepts="a directory, or null",
    )
    cross_host: Literal["gloo", "torchstore"] = key(
        "gloo",
        help=(
            "how a version reaches the weight relay of each generator node other than the trainer's: "
            "`gloo`, a weight sender on the trainer's node sends the trainer's channel over a gloo pair "
            "per relay, off the trainer's path, skipping to the newest version (the trainer on one node); "
            "`torchstore`, the trainer's ranks put their shards and each relay fetches them (needed for a "
            "trainer on several nodes) ([launch.md](launch.md#how-weights-cross-nodes))"
        ),
        resumable=True,
    )
    link_timeout_s: float = key(
        30.0,
        help=(
            "a gloo send or receive of a version that makes no progress for this long fails: that node "
            "keeps its version, a warning names it, and the newest version is sent again over a fresh "
            "pair"
        ),
        accepts="> 0",
        resumable=True,
    )

    def __post_init__(self) -> None:
        check_choices(self, "weights")
        check_range("weights.link_timeout_s", self.link_timeout_s, POSITIVE)

    @property
    def chosen_dir(self) -> str:
        """`channel_dir`, for code that runs once `resolved` has chosen it: a RuntimeError while null."""
        if self.channel_dir is None:
            raise RuntimeError("weights.channel_dir is null here: the run's scratch directory is chosen by resolved()")
        return self.channel_dir

    def resolved(self) -> "WeightsConfig":
        """This config with a channel directory chosen (a fresh one when none is set)."""
        if self.channel_dir is not None:
            return self
        fresh = default_root() / f"forge_async-{uuid.uuid4().hex[:12]}"
        return dataclasses.replace(self, channel_dir=str(fresh))
