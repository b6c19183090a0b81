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
    """Writes one JSON object per training step to `metrics.jsonl` (fresh per run) and prints a line."""

    def __init__(self, run_dir: Path, smoothing: int = 10):
        self.path = run_dir / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("w")
        self._recent = deque(maxlen=smoothing)

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
