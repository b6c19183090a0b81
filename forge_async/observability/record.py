"""RunRecord: what a run has done so far, in one place.

The loop keeps it up to date, checkpoints save it (`state_dict`), a resumed run
continues it, and summary.json is written from it, at any point of the run:
a run that fails while it restores a checkpoint is summarised like any other.
It does not grow with the run's steps: of the per-step rewards it keeps the two ends
summary.json reports (StepEnds).
"""

import statistics
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypedDict

STEP_ENDS = 10  # steps at each end of the run that summary.json's first / last figures average


class StepEnds:
    """A per-step figure (a step's mean reward, its loss), kept for the first and the last
    STEP_ENDS steps only: what a summary reports of it, in memory and checkpoints of a fixed size."""

    def __init__(self, rewards: Iterable[float] = ()):
        self.count = 0  # steps seen
        self.first: list[float] = []
        self.last: deque[float] = deque(maxlen=STEP_ENDS)
        for reward in rewards:
            self.append(reward)

    def append(self, reward: float) -> None:
        if len(self.first) < STEP_ENDS:
            self.first.append(reward)
        self.last.append(reward)
        self.count += 1

    def as_list(self) -> list[float]:
        """Every step's reward for a run of up to 2 * STEP_ENDS steps; else the first and the
        last STEP_ENDS, in order."""
        overlap = max(0, len(self.first) - (self.count - len(self.last)))
        return self.first + list(self.last)[overlap:]

    def means(self) -> tuple[int, float | None, float | None]:
        """(window, mean of the first `window` steps, mean of the last): the window is STEP_ENDS,
        or half the steps of a shorter run (at least 1); (1, None, None) before any step."""
        values = self.as_list()
        window = max(1, min(STEP_ENDS, len(values) // 2))
        if not values:
            return window, None, None
        return window, statistics.fmean(values[:window]), statistics.fmean(values[-window:])

    def state_dict(self) -> dict:
        return {"first": self.first, "last": list(self.last), "count": self.count}

    @classmethod
    def from_state(cls, state: dict | list[float]) -> "StepEnds":
        """From `state_dict`, or from a checkpoint written when every step's reward was kept (a list)."""
        if isinstance(state, list):
            return cls(state)
        ends = cls()
        ends.first, ends.last, ends.count = list(state["first"]), deque(state["last"], maxlen=STEP_ENDS), state["count"]
        return ends


class RunEnding(TypedDict):
    """How a run ended: the keys every app's summary.json opens with."""

    steps: int
    wall_s: float
    interrupted: bool
    stop_reason: str | None
    cut_short: list[str]
    failure: str | None


@dataclass
class RunRecord:
    step: int = 0  # optimizer steps taken
    version: int = 0  # the trainer's policy version (= step)
    trained: int = 0  # samples trained on
    trainer_idle_s: float = 0.0  # the trainer's wait for batches (async) or generation (sync)
    checkpoint_s: float = 0.0
    reward_ends: StepEnds = field(default_factory=StepEnds)  # each step's mean reward, at both ends
    target_reached: dict | None = None  # {"step", "wall_s"} when the smoothed reward first reached the target
    evaluations: int = 0  # evaluations started
    eval_first: dict | None = None  # the rows of the first and the latest evaluation
    eval_last: dict | None = None
    stop_reason: str | None = None  # the signal that interrupted the run
    # what a stop past its grace abandoned, or did not save (checkpoint.stop_grace_s)
    cut_short: list[str] = field(default_factory=list)
    failure: str | None = None  # what ended the run early (the trainer was fine: the run saved)
    wall_before_s: float = 0.0  # wall time of earlier segments of a resumed run
    segment_start: float = field(default_factory=time.perf_counter)  # this segment's start

    def wall_s(self) -> float:
        """Wall time of the whole run (every segment of a resumed one) up to now."""
        return self.wall_before_s + time.perf_counter() - self.segment_start

    def ending(self, wall_s: float) -> RunEnding:
        """How the run ended, as every app's summary.json says it (steps trained, wall time, stop)."""
        return {
            "steps": self.step,
            "wall_s": wall_s,
            "interrupted": self.stop_reason is not None,
            "stop_reason": self.stop_reason,
            "cut_short": self.cut_short,
            "failure": self.failure,
        }

    def start_segment(self) -> None:
        """Training (re)starts now: the time before it does not count towards this segment."""
        self.segment_start = time.perf_counter()

    def segment_s(self) -> float:
        return time.perf_counter() - self.segment_start

    def state_dict(self) -> dict:
        return {
            "step": self.step,
            "version": self.version,
            "trained": self.trained,
            "trainer_idle_s": self.trainer_idle_s,
            "wall_s": self.wall_s(),
            "checkpoint_s": self.checkpoint_s,
            "rewards": self.reward_ends.state_dict(),
            "target_reached": self.target_reached,
            "evaluations": {"count": self.evaluations, "first": self.eval_first, "last": self.eval_last},
        }

    def load_state_dict(self, state: dict) -> None:
        self.step, self.version, self.trained = state["step"], state["version"], state["trained"]
        self.trainer_idle_s, self.checkpoint_s = state["trainer_idle_s"], state["checkpoint_s"]
        self.wall_before_s = state["wall_s"]
        self.reward_ends, self.target_reached = StepEnds.from_state(state["rewards"]), state["target_reached"]
        evaluations = state.get("evaluations", {})  # absent from checkpoints taken without evaluation
        self.evaluations = evaluations.get("count", 0)
        self.eval_first, self.eval_last = evaluations.get("first"), evaluations.get("last")
