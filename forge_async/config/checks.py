"""Range checks for config values: a value out of range is one ConfigError naming the key,
the value and what the key accepts, e.g. `sampling.top_p=1.5: must be in (0, 1]`."""

import math
from dataclasses import dataclass

from forge_async.errors import ConfigError


@dataclass(frozen=True)
class Range:
    """The numbers from `low` to `high`, each end included unless marked open."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self) -> str:
        """As the error message says it: '>= 1', '> 0', 'in (0, 1]'; '' when unbounded."""
        if self.high == math.inf:
            return "" if self.low == -math.inf else f"{'>' if self.low_open else '>='} {self.low}"
        low, high = "(" if self.low_open else "[", ")" if self.high_open else "]"
        return f"in {low}{self.low}, {self.high}{high}"


AT_LEAST_0 = Range(0)
AT_LEAST_1 = Range(1)
POSITIVE = Range(0, low_open=True)
FRACTION = Range(0, 1, low_open=True)  # (0, 1]


def check_range(key: str, value: float | None, allowed: Range, *, nullable: bool = False, note: str = "") -> None:
    """Raise ConfigError unless `value` is in `allowed` (a float also finite), or None where `nullable`.

    `note` says why the range is what it is, or what the edge values mean ("0 = off").
    """
    if value is None and nullable:
        return
    nonfinite = isinstance(value, float) and not math.isfinite(value)
    if value is not None and value in allowed and not nonfinite:
        return
    accepted = f"a finite number {allowed}".rstrip() if nonfinite else str(allowed)
    if nullable:
        accepted += " or null"
    raise ConfigError(f"{key}={value}: must be {accepted}" + (f" ({note})" if note else ""))
