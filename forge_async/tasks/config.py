"""task.*: which task a run learns (configs/grpo.yaml `task:`)."""

from dataclasses import dataclass

from forge_async.config_checks import Range, check_range


@dataclass
class TaskConfig:
    name: str = "max_digit"  # max_digit | first_digit | copy_digits | tool_lookup | dataset
    num_digits: int = 3
    # Digits tasks: each prompt takes a uniformly random number of digits from min_digits to
    # num_digits (null: num_digits, every prompt the same). With copy_digits, answers of varying length.
    min_digits: int | None = None
    dataset: str | None = None  # .jsonl / .json / .parquet / .csv file, or a save_to_disk directory
    prompt_column: str = "prompt"  # text, or a list of chat messages ({role, content})
    answer_column: str = "answer"  # handed to the reward function as text
    skip_bad_rows: bool = False  # skip and count bad rows instead of failing at start
    reward_fn: str = "forge_async.tasks.rewards:exact_match"  # "module:function" for datasets

    def __post_init__(self) -> None:
        check_range(
            "task.min_digits", self.min_digits, Range(1, self.num_digits), nullable=True,
            note="at most task.num_digits",
        )


MULTI_TURN_TASKS = ("tool_lookup",)  # built-in tasks that bring an environment
