"""The rollout section of a run's config: when a run whose every episode drops stops."""

from dataclasses import dataclass

from forge_async.config.checks import AT_LEAST_0, POSITIVE, check_range
from forge_async.config.keys import key


@dataclass
class StallConfig:
    """stall.*: when a run whose episodes all drop stops, and how often the console says they drop."""

    max_dropped_episodes: int = key(
        512,
        help=(
            "episodes dropped in a row before the buffer, none kept, after which the run stops (exit "
            "status 1); 0 = never"
        ),
        accepts=">= 0",
        resumable=True,
    )
    report_every_s: float = key(
        10.0,
        help="while episodes are dropped, a console line at most this often with the counts by reason",
        accepts="> 0",
        resumable=True,
    )

    def __post_init__(self) -> None:
        check_range("stall.max_dropped_episodes", self.max_dropped_episodes, AT_LEAST_0, note="0 = never stop")
        check_range("stall.report_every_s", self.report_every_s, POSITIVE)
