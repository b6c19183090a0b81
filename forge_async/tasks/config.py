"""task.*: which task a run learns (configs/grpo.yaml `task:`)."""

from dataclasses import dataclass, field
from typing import Any

from forge_async.config.checks import Range, check_range
from forge_async.errors import ConfigError

# A short instruction the tiny model can afford: the answer format, nothing else.
DEFAULT_SYSTEM_PROMPT = "Answer in the form <answer>your answer</answer>."


@dataclass
class ReasoningGymDataset:
    """One dataset of the mix: reasoning-gym's name, its weight, its generator config."""

    name: str = "chain_sum"
    weight: float = 1.0  # relative share of the mix (> 0)
    config: dict[str, Any] = field(default_factory=dict)  # its config dataclass's fields, e.g. {min_terms: 2}


@dataclass
class ReasoningGymConfig:
    """task.reasoning_gym: procedural datasets of reasoning-gym (docs/tasks.md).

    `datasets` is a list, so that an override replaces the whole mix:
    task.reasoning_gym.datasets='[{name: chain_sum}, {name: count_bits, weight: 0.5}]'."""

    datasets: list[ReasoningGymDataset] = field(default_factory=lambda: [ReasoningGymDataset()])
    size: int = 100_000  # entries in the training split (generated on demand, as they are drawn)
    seed: int = 0  # the training split's seed; the held-out split is generated from eval_seed
    eval_seed: int = 1_000_003
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT  # null: the question alone, as one user message
    # The completion's answer is the text of its last <answer_tag>...</answer_tag>; null: the
    # whole completion, stripped.
    answer_tag: str | None = "answer"

    def __post_init__(self) -> None:
        if not self.datasets:
            raise ConfigError("task.reasoning_gym.datasets: name at least one dataset, e.g. [{name: chain_sum}]")
        names = [d.name for d in self.datasets]
        for i, dataset in enumerate(self.datasets):
            if not dataset.weight > 0:
                raise ConfigError(f"task.reasoning_gym.datasets[{i}].weight={dataset.weight}: must be > 0 ({dataset.name})")
            if dataset.name in names[:i]:
                raise ConfigError(f"task.reasoning_gym.datasets[{i}]: {dataset.name} is in the mix twice")
        check_range("task.reasoning_gym.size", self.size, Range(1))
        if self.seed == self.eval_seed:
            raise ConfigError(
                f"task.reasoning_gym.eval_seed={self.eval_seed}: must differ from task.reasoning_gym.seed "
                "(the held-out split is generated from its own seed)"
            )


@dataclass
class TaskConfig:
    # max_digit | first_digit | copy_digits | tool_lookup | dataset | reasoning_gym | seeds (env.name deals
    # each episode from a seed: a TextArena game)
    name: str = "max_digit"
    num_digits: int = 3
    # Digits tasks: each prompt takes a uniformly random number of digits from min_digits to
    # num_digits (null: num_digits, every prompt the same). With copy_digits, answers of varying length.
    min_digits: int | None = None
    dataset: str | None = None  # .jsonl / .json / .parquet / .csv file, or a save_to_disk directory
    prompt_column: str = "prompt"  # text, or a list of chat messages ({role, content})
    answer_column: str = "answer"  # handed to the reward function as text
    skip_bad_rows: bool = False  # skip and count bad rows instead of failing at start
    reward_fn: str = "forge_async.tasks.rewards:exact_match"  # "module:function" for datasets
    reasoning_gym: ReasoningGymConfig = field(default_factory=ReasoningGymConfig)

    def __post_init__(self) -> None:
        check_range(
            "task.min_digits", self.min_digits, Range(1, self.num_digits), nullable=True,
            note="at most task.num_digits",
        )


MULTI_TURN_TASKS = ("tool_lookup",)  # built-in tasks that bring an environment
