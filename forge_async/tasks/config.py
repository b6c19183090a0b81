"""task.*: which task a run learns (configs/grpo.yaml `task:`)."""

from dataclasses import dataclass, field
from typing import Any

from forge_async.config.keys import key
from forge_async.config.checks import Range, check_range
from forge_async.errors import ConfigError

# A short instruction the tiny model can afford: the answer format, nothing else.
DEFAULT_SYSTEM_PROMPT = "Answer in the form <answer>your answer</answer>."


@dataclass
class ReasoningGymDataset:
    """One dataset of the mix: reasoning-gym's name, its weight, its generator config."""

    name: str = key("chain_sum", help="a reasoning-gym dataset (`reasoning_gym.factory.DATASETS`)")
    weight: float = key(1.0, help="its share of the mix", accepts="> 0")
    config: dict[str, Any] = key({}, help="its generator config: its config dataclass's fields, e.g. `{min_terms: 2}`")


@dataclass
class ReasoningGymConfig:
    """task.reasoning_gym: procedural datasets of reasoning-gym (docs/tasks.md).

    `datasets` is a list, so that an override replaces the whole mix:
    task.reasoning_gym.datasets='[{name: chain_sum}, {name: count_bits, weight: 0.5}]'."""

    datasets: list[ReasoningGymDataset] = key(
        [ReasoningGymDataset()],
        help=(
            "the reasoning-gym mix: dataset names (`reasoning_gym.factory.DATASETS`), weights > 0, each "
            "dataset's generator config ([tasks.md](tasks.md#reasoning-gym)); an override replaces the "
            "list"
        ),
        accepts="a list of `{name, weight, config}`",
    )
    size: int = key(100_000, help="entries in the training split, generated as they are drawn", accepts=">= 1")
    seed: int = key(0, help="the training split's seed")
    eval_seed: int = key(1_000_003, help="the held-out split's seed", accepts="an integer other than `seed`")
    system_prompt: str | None = key(
        DEFAULT_SYSTEM_PROMPT,
        help="the system message before each question; null: none",
        accepts="text, or null",
    )
    answer_tag: str | None = key(
        "answer",
        help="the answer is the last `<tag>...</tag>` of the completion; null: the whole completion",
        accepts="a tag name, or null",
    )

    def __post_init__(self) -> None:
        if not self.datasets:
            raise ConfigError("task.reasoning_gym.datasets: name at least one dataset, e.g. [{name: chain_sum}]")
        names = [d.name for d in self.datasets]
        for i, dataset in enumerate(self.datasets):
            if not dataset.weight > 0:
                raise ConfigError(
                    f"task.reasoning_gym.datasets[{i}].weight={dataset.weight}: must be > 0 ({dataset.name})"
                )
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
    name: str = key(
        "max_digit",
        help=(
            "the task ([tasks.md](tasks.md)); `tool_lookup` is multi-turn "
            "([environments.md](environments.md)); `seeds` hands out only seeds, for an `env.name` that "
            "deals episodes from them (a TextArena game)"
        ),
        accepts="`max_digit`, `first_digit`, `copy_digits`, `tool_lookup`, `dataset`, `reasoning_gym`, `seeds`",
    )
    num_digits: int = key(
        3,
        help="digits per prompt (built-in tasks)",
        accepts=">= 1, and prompts that fit the context",
    )
    min_digits: int | None = key(
        None,
        help=(
            "built-in tasks: each prompt takes a uniformly random number of digits from `min_digits` to "
            "`num_digits`; null = `num_digits` (every prompt alike). With `copy_digits`, answers of "
            "varying length ([tasks.md](tasks.md#answers-of-varying-length))"
        ),
        accepts="1 to `task.num_digits`, or null",
    )
    dataset: str | None = key(
        None,
        help=(
            "`.jsonl`/`.json`/`.parquet`/`.csv` file (text files in UTF-8) or `save_to_disk` directory "
            "(`task.name=dataset`)"
        ),
        accepts="a file or directory, or null",
    )
    prompt_column: str = key(
        "prompt",
        help="the dataset column holding prompts: text, or a list of chat messages",
        accepts="a column of the dataset",
    )
    answer_column: str = key(
        "answer",
        help="the dataset column handed to the reward function (as text)",
        accepts="a column of the dataset",
    )
    skip_bad_rows: bool = key(
        False,
        help="skip bad rows at load and count them (summary.json `skipped_rows`) instead of failing",
    )
    reward_fn: str = key(
        "forge_async.tasks.rewards:exact_match",
        help=(
            "`function(answer, completion_text) -> float`; built in: "
            "`forge_async.tasks.rewards:exact_match`, `forge_async.tasks.math_answer:math_verify_reward` "
            "([tasks.md](tasks.md#math-answers-math_verify_reward))"
        ),
        accepts="`module:function`",
    )
    reasoning_gym: ReasoningGymConfig = field(default_factory=ReasoningGymConfig)

    def __post_init__(self) -> None:
        check_range(
            "task.min_digits",
            self.min_digits,
            Range(1, self.num_digits),
            nullable=True,
            note="at most task.num_digits",
        )


MULTI_TURN_TASKS = ("tool_lookup",)  # built-in tasks that bring an environment
