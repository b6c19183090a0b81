"""Per-step metrics: computed here, written here (metrics.jsonl, the console, optional sinks).

Every metric is named `area/what` (docs/metrics.md lists them): reward/, policy/,
train/, is/ (importance sampling), kl/, distill/, scoring/, samples/, generator/,
completion/, weights/, time/.
A row of metrics.jsonl is one training step: {"step": k, "reward/mean": ..., ...}, or one
evaluation on held-out prompts: {"step": k, "eval/version": v, "eval/reward_mean": ..., ...},
logged when it finished, k being the last step trained by then (`split_rows` tells them apart).
"""

import json
import statistics
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from forge_async.data.episode import Episode
from forge_async.observability.sinks import MetricSink
from forge_async.observability.outputs import write_side_output

# Mean entropy (nats per sampled token) below which the policy has collapsed onto
# near-deterministic outputs: exploration, and with it GRPO's signal, is gone.
ENTROPY_COLLAPSE = 0.05


def batch_metrics(episodes: list[Episode], trainer_version: int) -> dict[str, float]:
    """What the trainer is about to learn from, at `trainer_version` (before the step)."""
    ages = [e.policy_age(trainer_version) for e in episodes]
    lengths = [e.completion.model_tokens for e in episodes]  # a multi-turn episode's observations left out
    return {
        **scorer_metrics(episodes),
        "reward/mean": statistics.fmean(e.reward for e in episodes),
        "policy/age_mean": statistics.fmean(ages),
        "policy/age_max": max(ages),
        "policy/version_spread_max": max(e.completion.version_spread for e in episodes),
        "completion/length_mean": statistics.fmean(lengths),
        "completion/length_max": max(lengths),
        "completion/truncated_frac": statistics.fmean(e.completion.finish_reason == "length" for e in episodes),
        **env_token_metrics(episodes),
        **kept_set_metrics(episodes),
        **seat_metrics(episodes),
    }


def env_token_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Multi-turn: the environment's tokens per episode (its observations), over the batch; nothing
    when no episode of the batch has any."""
    env_tokens = [len(e.completion.token_ids) - e.completion.model_tokens for e in episodes]
    return {"completion/env_tokens_mean": statistics.fmean(env_tokens)} if any(env_tokens) else {}


def seat_metrics(episodes: list[Episode]) -> dict[str, float]:
    """With env.seats: each policy seat's mean reward, and the share of its episodes whose
    environment reward was positive (a game won); nothing for one-seat episodes."""
    seats: dict[int, list[Episode]] = {}
    for episode in episodes:
        if episode.completion.seat is not None:
            seats.setdefault(episode.completion.seat, []).append(episode)
    figures = {}
    for seat, played in sorted(seats.items()):
        figures[f"reward/seat_{seat}"] = statistics.fmean(e.reward for e in played)
        figures[f"seat_{seat}/won_frac"] = statistics.fmean((e.completion.env_reward or 0) > 0 for e in played)
    return figures


def kept_set_metrics(episodes: list[Episode]) -> dict[str, float]:
    """The kept sets' mean size (over the sampled tokens that have one), the share of sampled
    tokens whose set was over sampling.kept_set_cap, and the bytes they take a sampled token;
    nothing when no episode carries kept sets (sampling.keep_mask off)."""
    sets = [e.completion.kept_sets for e in episodes if e.completion.kept_sets is not None]
    sets = [k for k in sets if k.records_ids]
    if not sets:
        return {}
    sampled = sum(e.completion.model_tokens for e in episodes)
    with_set = sum(int((k.sizes > 0).sum()) for k in sets)
    return {
        "sampling/kept_mean": sum(len(k.ids) for k in sets) / max(with_set, 1),
        "sampling/kept_over_cap_frac": sum(k.over_cap for k in sets) / max(sampled, 1),
        "sampling/kept_missing_frac": sum(k.missing for k in sets) / max(sampled, 1),
        "sampling/kept_bytes_per_token": sum(k.nbytes for k in sets) / max(sampled, 1),
    }


def scorer_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Each figure the scorers gave episodes (reward/<name>, distill/reverse_kl), averaged over the
    episodes that have it."""
    values: dict[str, list[float]] = {}
    for episode in episodes:
        for key, value in (episode.metrics or {}).items():
            values.setdefault(key, []).append(value)
    return {key: statistics.fmean(v) for key, v in values.items()}


EVAL_KEY = "eval/version"  # the key that marks an evaluation row
EVAL_DROPPED = "eval/dropped_"  # + a reason: an evaluation's samples dropped for it


def success(row: dict) -> tuple[str, float]:
    """An evaluation row's share of successes, named as the console says it: the policy seats' wins
    in a game (env.seats: a win's and a loss's rewards, no pass mark), else pass@k."""
    if "eval/won_frac" in row:
        return "won", row["eval/won_frac"]
    return f"pass@{row['eval/samples_per_prompt']}", row["eval/pass@k"]


def _rate(value: float | None) -> str:
    """A rate on the console; `-` where none was measured yet (step_figures.TokenRate)."""
    return "-" if value is None else f"{value:,.0f}"


def measured_nothing(row: dict) -> bool:
    """Whether every sample of an evaluation (its row) was dropped: its figures measure nothing."""
    return row["eval/dropped"] >= row["eval/prompts"] * row["eval/samples_per_prompt"]


def split_rows(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """metrics.jsonl's rows as (training steps, evaluations), each in file order."""
    return [r for r in rows if EVAL_KEY not in r], [r for r in rows if EVAL_KEY in r]


def read_rows(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """RUN_DIR/metrics.jsonl as (training steps, evaluations)."""
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return split_rows([json.loads(line) for line in lines if line.strip()])


class MetricsLog:
    """Writes one row per training step to `metrics.jsonl` and the sinks, and prints a line.

    A fresh run starts the file anew. A resumed run (`resume_after_step=k`) keeps
    the rows of steps 1..k and appends from there, so every step appears once.
    """

    def __init__(
        self,
        run_dir: Path,
        total_steps: int,
        target_reward: float,
        sinks: Sequence[MetricSink] = (),
        smoothing: int = 10,
        resume_after_step: int | None = None,
    ):
        self.path = run_dir / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_after_step is None:
            self._file = self.path.open("wb", buffering=0)
        else:
            self._keep_rows_up_to(resume_after_step)
            self._file = self.path.open("ab", buffering=0)
        self.total_steps = total_steps
        self.target_reward = target_reward
        self.sinks = list(sinks)
        self._recent: deque[float] = deque(maxlen=smoothing)  # the last steps' reward/mean
        self._entropy_warned = False
        self._over_cap_warned = False
        self._held_lines: list[str] | None = None  # step lines kept back (hold_step_lines)

    def _keep_rows_up_to(self, step: int) -> None:
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= step]
        self.path.write_text("".join(line + "\n" for line in kept))

    def state_dict(self) -> dict:
        return {"recent": list(self._recent)}

    def load_state_dict(self, state: dict) -> None:
        self._recent.extend(state["recent"])

    @property
    def reward_smoothed(self) -> float:
        return statistics.fmean(self._recent) if self._recent else 0.0

    def log(self, record: dict) -> None:
        self._recent.append(record["reward/mean"])
        record["reward/smoothed"] = self.reward_smoothed
        self.write(record)
        self.print_step_line(self._console_line(record))
        self._warn_on_entropy_collapse(record)
        self._warn_on_kept_sets_over_cap(record)

    def hold_step_lines(self) -> None:
        """Keep the step lines back until the next evaluation's line (`log_eval`, or
        `release_step_lines`): the run's first evaluation, of version 0, runs beside the first steps
        (async mode) and would otherwise print after step 1's line."""
        self._held_lines = []

    def release_step_lines(self) -> None:
        """The step lines kept back, printed now; from here on each is printed as it comes."""
        held, self._held_lines = self._held_lines or [], None
        for line in held:
            print(line, flush=True)

    def print_step_line(self, line: str) -> None:
        """A training step's console line: printed, or kept back while `hold_step_lines` holds them."""
        if self._held_lines is None:
            print(line, flush=True)
        else:
            self._held_lines.append(line)

    def write(self, record: dict) -> None:
        """A training step's row into metrics.jsonl and the sinks (`log` adds GRPO's figures and
        console line; apps.sft its own)."""
        self._append(record)
        scalars = {k: v for k, v in record.items() if k != "step"}
        for sink in self.sinks:
            sink.write(record["step"], scalars)

    def log_eval(self, step: int, row: dict) -> None:
        """An evaluation's row, logged at `step` (the last step trained when it finished)."""
        self._append({"step": step, **row})
        for sink in self.sinks:
            sink.write(step, row)
        if measured_nothing(row):
            reasons = ", ".join(
                f"{k.removeprefix(EVAL_DROPPED)} {n}" for k, n in row.items() if k.startswith(EVAL_DROPPED)
            )
            print(
                f"eval v{row['eval/version']} | all {row['eval/dropped']} episodes dropped ({reasons}) | "
                f"{row['eval/prompts']} held-out prompts, {row['eval/seconds']:.1f}s",
                flush=True,
            )
            self.release_step_lines()
            return
        name, share = success(row)
        print(
            f"eval v{row['eval/version']} | reward {row['eval/reward_mean']:.2f} | {name} {share:.2f} | "
            f"len {row['eval/len_mean']:.1f} | {row['eval/prompts']} held-out prompts, {row['eval/seconds']:.1f}s",
            flush=True,
        )
        self.release_step_lines()

    def _append(self, row: dict) -> None:
        """One row onto metrics.jsonl, whole or not at all: a row that cannot be written is cut
        off again, reported once, and the run goes on; on a full disk it stops (observability/outputs.py)."""
        line = (json.dumps(row) + "\n").encode()

        def append() -> None:
            end = self._file.tell()
            try:
                written = 0
                while written < len(line):
                    written += self._file.write(line[written:])
            except OSError:
                self._file.truncate(end)
                raise

        write_side_output(self.path, append)

    def _console_line(self, record: dict) -> str:
        step, wall = record["step"], record["time/wall_s"]
        eta = wall / step * (self.total_steps - step) if step else 0.0
        return (
            f"step {step:4d}/{self.total_steps} | reward {record['reward/mean']:.2f} "
            f"(avg{self._recent.maxlen} {self.reward_smoothed:.2f}) | "
            f"age {record['policy/age_mean']:.2f}/{record['policy/age_max']} | "
            f"dropped {record['samples/dropped_stale']} stale, {record['samples/dropped_other']} other, "
            f"{record['samples/not_started']} not started | "
            f"gen {_rate(record.get('generator/tokens_per_s'))} tok/s | "
            f"trainer idle {100 * record['train/idle_frac']:.0f}% | "
            f"{wall:.1f}s, ETA {eta:.0f}s"
        )

    def _warn_on_entropy_collapse(self, record: dict) -> None:
        """Once per run: entropy gone while the reward is still short of the target. Judged over
        the whole vocabulary: over a small kept set (sampling.keep_mask) it is small by design."""
        entropy = record.get("train/entropy_whole", record["train/entropy"])
        collapsed = entropy < ENTROPY_COLLAPSE
        if collapsed and self.reward_smoothed < self.target_reward and not self._entropy_warned:
            self._entropy_warned = True
            print(
                f"warning: policy entropy collapsed to {entropy:.3f} nats/token at "
                f"step {record['step']}: completions are near-deterministic, little left to learn from "
                "(raise sampling.temperature or lower trainer.lr)",
                flush=True,
            )

    def _warn_on_kept_sets_over_cap(self, record: dict) -> None:
        """Once per run: sampled tokens whose kept set was too large to record (trained over the
        whole vocabulary, their behaviour logprob made whole-vocabulary by their log mass)."""
        share = record.get("sampling/kept_over_cap_frac", 0.0)
        if share > 0 and not self._over_cap_warned:
            self._over_cap_warned = True
            print(
                f"note: {100 * share:.1f}% of step {record['step']}'s sampled tokens had a kept set over "
                "sampling.kept_set_cap: they train over the whole vocabulary, not over what the sampler kept "
                "(raise sampling.kept_set_cap to mask them; sampling/kept_over_cap_frac follows it)",
                flush=True,
            )

    def close(self) -> None:
        self.release_step_lines()  # an evaluation a failure cancelled prints no line to release them
        self._file.close()
        for sink in self.sinks:
            sink.close()
