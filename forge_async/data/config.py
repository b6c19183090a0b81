"""filter.*: dynamic sampling, the groups dropped before training (data/filters.py)."""

import math
from dataclasses import dataclass

from forge_async.config.keys import key
from forge_async.config.checks import POSITIVE, check_range


@dataclass
class FilterConfig:
    zero_variance_groups: bool = key(
        False,
        help=(
            "dynamic sampling: drop groups whose rewards are all equal (zero advantage everywhere) and "
            "whose tokens carry no per-token signal (a teacher's) as they reach the buffer, counted as "
            "`zero_variance`, and fill every batch with groups that carry signal "
            "([tasks.md](tasks.md#dynamic-sampling))"
        ),
    )
    max_oversampling: float | None = key(
        4.0,
        help=(
            "with the filter on: at most this many batches' worth of episodes dropped per training batch; "
            "groups beyond it are trained on (`kept_zero_variance`, one warning); null = no cap"
        ),
        accepts="> 0, or null",
    )

    def __post_init__(self) -> None:
        check_range("filter.max_oversampling", self.max_oversampling, POSITIVE, nullable=True, note="null = no cap")

    def max_drops(self, batch_size: int) -> int | None:
        """Episodes the buffer may drop for no signal between two training batches (None: any)."""
        return None if self.max_oversampling is None else math.ceil(self.max_oversampling * batch_size)
