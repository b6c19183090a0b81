"""filter.*: dynamic sampling, the groups dropped before training (data/filters.py)."""

import math
from dataclasses import dataclass

from forge_async.config.checks import POSITIVE, check_range


@dataclass
class FilterConfig:
    zero_variance_groups: bool = False  # drop groups whose rewards are all equal
    # At most this many batches' worth of episodes dropped per training batch; beyond it, such
    # groups are trained on. null = no cap (a batch waits for groups with signal however long).
    max_oversampling: float | None = 4.0

    def __post_init__(self) -> None:
        check_range("filter.max_oversampling", self.max_oversampling, POSITIVE, nullable=True, note="null = no cap")

    def max_drops(self, batch_size: int) -> int | None:
        """Episodes the buffer may drop for no signal between two training batches (None: any)."""
        return None if self.max_oversampling is None else math.ceil(self.max_oversampling * batch_size)
