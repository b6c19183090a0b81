"""Per-step metrics: computed here, written here (metrics.jsonl + one console line)."""

import json
import statistics
from collections import deque
from pathlib import Path

from forge_async.data.episode import Episode


def batch_metrics(episodes: list[Episode], trainer_version: int) -> dict[str, float]:
    """What the trainer is about to learn from, at `trainer_version` (before the step)."""
    ages = [e.policy_age(trainer_version) for e in episodes]
    return {
        "reward_mean": statistics.fmean(e.reward for e in episodes),
        "policy_age_mean": statistics.fmean(ages),
        "policy_age_max": max(ages),
        "version_spread_max": max(e.completion.version_spread for e in episodes),
    }


class MetricsLog:
    """Writes one JSON object per training step to `metrics.jsonl` and prints a line.

    A fresh run starts the file anew. A resumed run (`resume_after_step=k`) keeps
    the rows of steps 1..k and appends from there, so every step appears once.
    """

    def __init__(self, run_dir: Path, smoothing: int = 10, resume_after_step: int | None = None):
        self.path = run_dir / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_after_step is None:
            self._file = self.path.open("w")
        else:
            self._keep_rows_up_to(resume_after_step)
            self._file = self.path.open("a")
        self._recent = deque(maxlen=smoothing)

    def _keep_rows_up_to(self, step: int) -> None:
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= step]
        self.path.write_text("".join(line + "\n" for line in kept))

    def state_dict(self) -> dict:
        return {"recent": list(self._recent)}

    def load_state_dict(self, state: dict) -> None:
        self._recent.extend(state["recent"])

    @property
    def reward_avg(self) -> float:
        return statistics.fmean(self._recent) if self._recent else 0.0

    def log(self, record: dict) -> None:
        self._recent.append(record["reward_mean"])
        record["reward_avg"] = self.reward_avg
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        print(
            f"step {record['step']:4d} | reward {record['reward_mean']:.2f} "
            f"(avg{self._recent.maxlen} {self.reward_avg:.2f}) | "
            f"age {record['policy_age_mean']:.2f}/{record['policy_age_max']} | "
            f"dropped {record['dropped_stale']} | "
            f"gen {record['gen_tokens_per_s']:,.0f} tok/s | "
            f"trainer idle {100 * record['trainer_idle_frac']:.0f}% | "
            f"sync {record['weight_sync_ms']:.0f} ms | {record['wall_s']:.1f}s",
            flush=True,
        )

    def close(self) -> None:
        self._file.close()
