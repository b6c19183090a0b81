"""RunRecord: what a run has done so far, in one place.

The loop keeps it up to date, checkpoints save it (`state_dict`), a resumed run
continues it, and summary.json is written from it, at any point of the run:
a run that fails while it restores a checkpoint is summarised like any other.
"""

import time
from dataclasses import dataclass, field


@dataclass
class RunRecord:
    step: int = 0  # optimizer steps taken
    version: int = 0  # the trainer's policy version (= step)
    trained: int = 0  # samples trained on
    trainer_idle_s: float = 0.0  # the trainer's wait for batches (async) or generation (sync)
    checkpoint_s: float = 0.0
    rewards: list[float] = field(default_factory=list)  # each step's mean reward
    target_reached: dict | None = None  # {"step", "wall_s"} when the smoothed reward first reached the target
    evaluations: int = 0  # evaluations started
    eval_first: dict | None = None  # the rows of the first and the latest evaluation
    eval_last: dict | None = None
    stop_reason: str | None = None  # the signal that interrupted the run
    failure: str | None = None  # what ended the run early (the trainer was fine: the run saved)
    wall_before_s: float = 0.0  # wall time of earlier segments of a resumed run
    segment_start: float = field(default_factory=time.perf_counter)  # this segment's start

    def wall_s(self) -> float:
        """Wall time of the whole run (every segment of a resumed one) up to now."""
        return self.wall_before_s + time.perf_counter() - self.segment_start

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
            "rewards": list(self.rewards),
            "target_reached": self.target_reached,
            "evaluations": {"count": self.evaluations, "first": self.eval_first, "last": self.eval_last},
        }

    def load_state_dict(self, state: dict) -> None:
        self.step, self.version, self.trained = state["step"], state["version"], state["trained"]
        self.trainer_idle_s, self.checkpoint_s = state["trainer_idle_s"], state["checkpoint_s"]
        self.wall_before_s = state["wall_s"]
        self.rewards, self.target_reached = state["rewards"], state["target_reached"]
        evaluations = state.get("evaluations", {})  # absent from checkpoints taken without evaluation
        self.evaluations = evaluations.get("count", 0)
        self.eval_first, self.eval_last = evaluations.get("first"), evaluations.get("last")
