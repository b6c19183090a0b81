"""The replay buffer's policy: bounded FIFO of episodes with a hard policy-age limit."""

from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from forge_async.data.accounting import SampleAccount
from forge_async.data.episode import Episode
from forge_async.data.filters import split_zero_variance_groups, whole_groups_within
from forge_async.errors import ConfigError

SCORER_ERROR = "scorer_error"  # the drop reason of completions the scoring tier could not score


@dataclass(frozen=True)
class DropCounts:
    """Samples lost on their way to the buffer, by reason: what `add(episodes, dropped=...)` counts
    beside the episodes it holds.

    `started`: samples a generator produced and that were lost after it (a scorer's error, an
    environment's), counted as generated (`added`). `not_started`: those of episodes dropped
    before their first model turn, which never reached a generator: counted as dropped, not as
    generated. Reasons with a count of 0 are left out.
    """

    started: Mapping[str, int] = field(default_factory=dict)
    not_started: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("started", "not_started"):
            counts = getattr(self, name)
            if not isinstance(counts, Mapping) or not all(
                isinstance(reason, str) and isinstance(n, int) and n >= 0 for reason, n in counts.items()
            ):
                raise TypeError(f"DropCounts.{name} maps reasons (str) to sample counts (int >= 0), got {counts!r}")
            object.__setattr__(self, name, {reason: n for reason, n in counts.items() if n})

    @classmethod
    def unscored(cls, completions: int) -> "DropCounts":
        """`completions` the scoring tier could not score (the count `ScoringTier.score` returns
        beside its episodes): `scorer_error`."""
        return cls(started={SCORER_ERROR: completions})

    def __add__(self, other: "DropCounts") -> "DropCounts":
        return DropCounts(
            dict(Counter(self.started) + Counter(other.started)),
            dict(Counter(self.not_started) + Counter(other.not_started)),
        )

    def generated(self) -> int:
        """The samples that reached a generator (`started`)."""
        return sum(self.started.values())

    def total(self) -> int:
        return self.generated() + sum(self.not_started.values())

    def by_reason(self) -> dict[str, int]:
        """Every sample lost, by reason, started or not."""
        return dict(Counter(self.started) + Counter(self.not_started))


@dataclass(frozen=True)
class BufferStats:
    """The buffer's counters at one moment: what it holds, and what came in and went out."""

    size: int  # episodes held
    added: int  # episodes that reached it, dropped ones included (its `generated`)
    sampled: int  # taken for training
    dropped_stale: int
    dropped_other: int  # every other reason (zero_variance, overflow, buffer_lost, ...) of episodes in `added`
    dropped_by_reason: dict[str, int]  # every drop, those of `not_started` included
    kept_zero_variance: int  # groups with equal rewards trained on: over filter.max_oversampling
    dropped_stale_by_len: dict  # per completion-length quartile (docs/staleness.md)
    # episodes dropped before their first model turn (not in `added`), by reason
    not_started: dict[str, int] = field(default_factory=dict)

    @property
    def dropped_total(self) -> int:
        """Every episode dropped, before its first model turn or after: admitted samples that will not be trained."""
        return sum(self.dropped_by_reason.values())

    def account(self, trained: int, *, in_flight: int = 0, lost: int = 0) -> SampleAccount:
        """Where the samples that reached the buffer went, `trained` of them trained on."""
        return SampleAccount(
            generated=self.added,
            trained=trained,
            dropped_stale=self.dropped_stale,
            dropped_other=self.dropped_other,
            left_in_buffer=self.size,
            in_flight=in_flight,
            lost=lost,
        )


def check_settings(max_policy_age: int, capacity: int) -> None:
    """A buffer's settings, or a ConfigError naming the one out of range."""
    if not isinstance(max_policy_age, int) or max_policy_age < 0:
        raise ConfigError(f"replay buffer: max_policy_age must be >= 0, got {max_policy_age!r}")
    if not isinstance(capacity, int) or capacity < 1:
        raise ConfigError(f"replay buffer: capacity must be >= 1, got {capacity!r}")


def check_added(episodes: object, dropped: object) -> None:
    """What `add` takes, or a TypeError naming the argument: a list of episodes, and the samples
    lost on their way as a DropCounts (or None)."""
    if not isinstance(episodes, list):
        raise TypeError(f"add's episodes: a list of Episode, got {type(episodes).__name__}")
    if dropped is not None and not isinstance(dropped, DropCounts):
        raise TypeError(
            f"add's dropped: a DropCounts (DropCounts.unscored(n): the n completions the scoring tier "
            f"could not score), got {type(dropped).__name__} {dropped!r}"
        )


class EpisodeBuffer:
    """Holds scored episodes until the trainer takes them.

    `sample(batch_size, trainer_version=v)` first drops (and counts, as "stale")
    every held episode whose policy age exceeds `max_policy_age`, then returns
    the `batch_size` oldest episodes, or None if fewer are held. When the buffer
    is full, adding evicts the oldest episodes, counted as "overflow"; with
    `drop_zero_variance`, groups whose rewards are all equal (and that carry no per-token
    signal) are dropped as they arrive, counted as "zero_variance", up to
    `max_zero_variance_drops` episodes between two sampled batches; beyond that they are
    kept (`kept_zero_variance`; data/filters.py). Samples lost on the way
    (a scorer's or an environment's error) arrive as a DropCounts; those of
    episodes that never reached a generator (its `not_started`) are counted apart, not as
    added. Counters keep every episode accounted for: added = sampled + dropped (by
    reason, less not_started) + held.
    Completion lengths (model tokens) of the episodes added and of those dropped as
    stale are counted too: a long completion is older when it arrives, so a hard
    drop could favour short ones (`stale_drops_by_length`).
    """

    def __init__(
        self,
        *,
        max_policy_age: int,
        capacity: int,
        drop_zero_variance: bool = False,
        max_zero_variance_drops: int | None = None,
    ):
        check_settings(max_policy_age, capacity)
        self.max_policy_age = max_policy_age
        self.capacity = capacity
        self.drop_zero_variance = drop_zero_variance
        self.max_zero_variance_drops = max_zero_variance_drops
        self.kept_zero_variance = 0  # episodes of no-signal groups kept: over the cap
        self._zero_variance_since_sample = 0
        self._episodes: deque[Episode] = deque()
        self.added = 0
        self.sampled = 0
        self.dropped: Counter[str] = Counter()  # by reason, not_started's included
        self.not_started: Counter[str] = Counter()
        self.added_by_len: Counter[int] = Counter()  # episodes added, by completion length
        self.stale_by_len: Counter[int] = Counter()  # episodes dropped as stale, by completion length

    def __len__(self) -> int:
        return len(self._episodes)

    def add(self, episodes: list[Episode], *, dropped: DropCounts | None = None) -> None:
        """Hold `episodes` (whole groups); with `drop_zero_variance`, drop those of groups whose
        rewards are all equal and whose tokens carry no per-token signal ("zero_variance").
        `dropped`: samples of the same groups lost before they got here, by reason (a scorer's
        error, an environment's), counted with the rest."""
        check_added(episodes, dropped)
        if dropped is not None:
            self.dropped.update(dropped.by_reason())
            self.not_started.update(dropped.not_started)
            self.added += dropped.generated()
        self.added += len(episodes)
        self.added_by_len.update(e.completion.model_tokens for e in episodes)
        if self.drop_zero_variance:
            episodes, no_signal = split_zero_variance_groups(episodes)
            no_signal_dropped, kept = self._within_drop_cap(no_signal)
            self.dropped["zero_variance"] += len(no_signal_dropped)
            self._zero_variance_since_sample += len(no_signal_dropped)
            self.kept_zero_variance += len(kept)
            episodes += kept
        self._episodes.extend(episodes)
        while len(self._episodes) > self.capacity:
            self._episodes.popleft()
            self.dropped["overflow"] += 1

    def _within_drop_cap(self, no_signal: list[Episode]) -> tuple[list[Episode], list[Episode]]:
        """(no-signal groups to drop, those over the cap to keep)."""
        if self.max_zero_variance_drops is None:
            return no_signal, []
        return whole_groups_within(no_signal, self.max_zero_variance_drops - self._zero_variance_since_sample)

    def drop_stale(self, trainer_version: int) -> int:
        fresh: list[Episode] = []
        stale: list[Episode] = []
        for e in self._episodes:
            (fresh if e.policy_age(trainer_version) <= self.max_policy_age else stale).append(e)
        self._episodes = deque(fresh)
        self.dropped["stale"] += len(stale)
        self.stale_by_len.update(e.completion.model_tokens for e in stale)
        return len(stale)

    def sample(self, batch_size: int, *, trainer_version: int) -> list[Episode] | None:
        """The `batch_size` oldest episodes, once those too old for `trainer_version` are dropped;
        None while fewer are held."""
        self.drop_stale(trainer_version)
        if len(self._episodes) < batch_size:
            return None
        batch = [self._episodes.popleft() for _ in range(batch_size)]
        self.sampled += batch_size
        self._zero_variance_since_sample = 0
        return batch

    def stats(self) -> BufferStats:
        return BufferStats(
            size=len(self._episodes),
            added=self.added,
            sampled=self.sampled,
            dropped_stale=self.dropped["stale"],
            dropped_other=sum(n for reason, n in self.dropped.items() if reason != "stale") - self.not_started.total(),
            dropped_by_reason=dict(self.dropped),
            not_started=dict(self.not_started),
            kept_zero_variance=self.kept_zero_variance,
            dropped_stale_by_len=stale_drops_by_length(self.added_by_len, self.stale_by_len),
        )

    def state_dict(self) -> dict:
        """Held episodes and counters, taken together (for whole-run checkpoints)."""
        return {
            "episodes": list(self._episodes),
            "added": self.added,
            "sampled": self.sampled,
            "dropped": dict(self.dropped),
            "not_started": dict(self.not_started),
            "kept_zero_variance": self.kept_zero_variance,
            "zero_variance_since_sample": self._zero_variance_since_sample,
            "added_by_len": dict(self.added_by_len),
            "stale_by_len": dict(self.stale_by_len),
        }

    def load_state_dict(self, state: dict) -> None:
        self._episodes = deque(state["episodes"])
        self.added, self.sampled = state["added"], state["sampled"]
        self.dropped = Counter(state["dropped"])
        self.not_started = Counter(state.get("not_started", {}))  # absent before they were counted apart
        self.kept_zero_variance = state.get("kept_zero_variance", 0)  # absent before the cap existed
        self._zero_variance_since_sample = state.get("zero_variance_since_sample", 0)
        # Checkpoints written before lengths were counted have none: count from here on.
        self.added_by_len = Counter(state.get("added_by_len", {}))
        self.stale_by_len = Counter(state.get("stale_by_len", {}))


def length_quartiles(lengths: Counter[int]) -> list[list[int]]:
    """The lengths of `lengths` (length -> episodes) in quartiles by rank, shortest first.

    Episodes of one length stay together: a length goes to the quartile that holds the middle
    of its episodes' ranks. Where one length holds many episodes, a quartile may be left
    empty; empty ones are left out.
    """
    total, below = sum(lengths.values()), 0
    quartiles: list[list[int]] = [[], [], [], []]
    for length in sorted(lengths):
        middle_rank = below + lengths[length] / 2
        quartiles[min(3, int(4 * middle_rank / total))].append(length)
        below += lengths[length]
    return [q for q in quartiles if q]


def stale_drops_by_length(added: Counter[int], stale: Counter[int]) -> dict:
    """Stale drops per completion-length quartile of the episodes added, and the drop rate of the
    longest quartile over the shortest's (None when the shortest has no drops, or there is one quartile)."""
    quartiles: list[dict[str, Any]] = []
    for lengths in length_quartiles(added):
        n_added, n_stale = sum(added[n] for n in lengths), sum(stale[n] for n in lengths)
        quartiles.append(
            {
                "lengths": [lengths[0], lengths[-1]],
                "added": n_added,
                "dropped_stale": n_stale,
                "drop_rate": n_stale / n_added,
            }
        )
    shortest = quartiles[0]["drop_rate"] if len(quartiles) > 1 else 0
    ratio = quartiles[-1]["drop_rate"] / shortest if shortest else None
    return {"quartiles": quartiles, "longest_to_shortest": ratio}
