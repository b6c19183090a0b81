"""Whether a run still progresses: episodes kept against episodes dropped on the way to the buffer.

The rollouts tell the watch what became of each group (or single-turn call): how many of
its episodes went on to the buffer, how many were dropped before it (an environment's
error or timeout, a scorer's error) and the message of each reason. Two things follow:

- while episodes are being dropped, a console line at most every `stall.report_every_s`
  with the counts by reason since the last line (the first drop of a reason is said at once,
  with its message);
- once `stall.max_dropped_episodes` episodes in a row were dropped and none kept, the run
  cannot progress: `check` raises RunStalled, one line naming the reasons, the count and the
  first error's message, and the run ends as other failures do (summary, exit status 1).

Only a kept episode ends a streak: a slow run (a long first compile, a slow environment)
that still yields never trips it, however long it takes; drops the buffer makes (stale,
zero_variance, overflow) are its own policy, not failures, and are not watched.
"""

import time
from collections import Counter
from collections.abc import Callable, Mapping

from forge_async.rollout.config import StallConfig
from forge_async.observability.console import since_launch


class RunStalled(RuntimeError):
    """Every episode for stall.max_dropped_episodes in a row was dropped: the run cannot progress."""


class ProgressWatch:
    def __init__(self, config: StallConfig, clock: Callable[[], float] = time.monotonic):
        self.config = config
        self._clock = clock
        self._streak: Counter[str] = Counter()  # dropped since the last kept episode, by reason
        self._first_messages: dict[str, str] = {}  # of the streak, by reason
        self._unsaid: Counter[str] = Counter()  # dropped since the last console line, by reason
        self._kept_unsaid = 0  # kept since the last console line
        self._said_at = 0.0  # set by the first drop's line, which comes before any other
        self._reasons_said: set[str] = set()

    def note(self, kept: int, dropped: Mapping[str, int], messages: Mapping[str, str] | None = None) -> None:
        """What became of one group's (or call's) episodes: `kept` on to the buffer, `dropped` by
        reason before it; `messages`: what went wrong, one per reason dropped."""
        messages = messages or {}
        if kept:
            self._streak.clear()
            self._first_messages.clear()
        else:
            self._streak.update(dropped)
            for reason, message in messages.items():
                self._first_messages.setdefault(reason, message)
        self._kept_unsaid += kept
        self._unsaid.update({reason: n for reason, n in dropped.items() if n})
        for reason in dropped.keys() - self._reasons_said:
            self._reasons_said.add(reason)
            self._say_first(reason, messages.get(reason, "no message"))
        self._say_if_due()

    def check(self) -> None:
        """Say the drops if due; RunStalled once the streak reaches stall.max_dropped_episodes."""
        self._say_if_due()
        limit, dropped = self.config.max_dropped_episodes, sum(self._streak.values())
        if limit and dropped >= limit:
            raise RunStalled(self._verdict(dropped))

    def _verdict(self, dropped: int) -> str:
        reason = self._streak.most_common(1)[0][0]
        first = self._first_messages.get(reason, "no message")
        return (
            f"no episode kept: the last {dropped} episodes were all dropped ({_by_reason(self._streak)}); "
            f"first {reason}: {first} (stall.max_dropped_episodes={self.config.max_dropped_episodes})"
        )

    def _say_first(self, reason: str, message: str) -> None:
        print(
            f"{since_launch()} episode dropped ({reason}): {message}; drops are counted "
            f"(samples/dropped_{reason}) and said every {self.config.report_every_s:g}s while they go on",
            flush=True,
        )
        self._said_at = self._clock()

    def _say_if_due(self) -> None:
        now = self._clock()
        if not self._unsaid or now - self._said_at < self.config.report_every_s:
            return
        print(
            f"{since_launch()} episodes dropped in the last {now - self._said_at:.0f}s: "
            f"{_by_reason(self._unsaid)}; kept {self._kept_unsaid}",
            flush=True,
        )
        self._said_at = now
        self._unsaid.clear()
        self._kept_unsaid = 0


def _by_reason(counts: Counter[str]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in counts.most_common())
