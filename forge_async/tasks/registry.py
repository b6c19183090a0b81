"""The tasks of this room by `task.name`, each with its builder. The run's task is built by
envs/registry.py's `build_task`, from these and the built-in game that deals its own prompts
(`tool_lookup`: envs/games/tool_lookup.py)."""

from collections.abc import Callable

from forge_async.tasks.config import TaskConfig
from forge_async.tasks.digits import DIGIT_RULES, DigitTask
from forge_async.tasks.seeds import SeedsTask
from forge_async.tasks.task import Task, TaskError

# (task.*, tokenizer, the most tokens a prompt may take) -> the task
TaskBuilder = Callable[[TaskConfig, object, int], Task]


def _digits(config: TaskConfig, tokenizer, max_prompt_tokens: int) -> Task:
    return DigitTask(config.name, config.num_digits, tokenizer, max_prompt_tokens, config.min_digits)


def _dataset(config: TaskConfig, tokenizer, max_prompt_tokens: int) -> Task:
    if not config.dataset:
        raise TaskError(
            "task.name=dataset needs task.dataset=<.jsonl/.json/.parquet/.csv file or save_to_disk directory>"
        )
    from forge_async.tasks.dataset import DatasetTask  # `datasets` is slow to import: only for this task

    task = DatasetTask(config, tokenizer, max_prompt_tokens)
    print(task.load_report())
    return task


def _reasoning_gym(config: TaskConfig, tokenizer, max_prompt_tokens: int) -> Task:
    from forge_async.tasks.reasoning_gym import ReasoningGymTask  # reasoning-gym: only for this task

    return ReasoningGymTask(config.reasoning_gym, tokenizer, max_prompt_tokens)


def _seeds(config: TaskConfig, tokenizer, max_prompt_tokens: int) -> Task:
    return SeedsTask()


TASKS: dict[str, TaskBuilder] = {
    **dict.fromkeys(DIGIT_RULES, _digits),
    "dataset": _dataset,
    "reasoning_gym": _reasoning_gym,
    "seeds": _seeds,
}
