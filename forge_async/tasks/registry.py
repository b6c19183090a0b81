"""The task `task.name` names, built and checked before any proc starts training."""

from collections.abc import Callable

from forge_async.tasks.config import TaskConfig
from forge_async.tasks.digits import DIGIT_RULES, DigitTask
from forge_async.tasks.seeds import SeedsTask
from forge_async.tasks.task import Task, TaskError
from forge_async.tasks.tool_lookup import ToolLookupTask


def _digits(config: TaskConfig, tokenizer, max_prompt_tokens: int) -> Task:
    return DigitTask(config.name, config.num_digits, tokenizer, max_prompt_tokens, config.min_digits)


def _tool_lookup(config: TaskConfig, tokenizer, max_prompt_tokens: int) -> Task:
    return ToolLookupTask(tokenizer, max_prompt_tokens)


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


TASKS: dict[str, Callable[[TaskConfig, object, int], Task]] = {
    **dict.fromkeys(DIGIT_RULES, _digits),
    "tool_lookup": _tool_lookup,
    "dataset": _dataset,
    "reasoning_gym": _reasoning_gym,
    "seeds": _seeds,
}


def build_task(config: TaskConfig, tokenizer, max_prompt_tokens: int) -> Task:
    """The task `config` names, every prompt checked to fit in `max_prompt_tokens`.

    `max_prompt_tokens` is the context length minus sampling.max_tokens: what a prompt
    may take so that a full-length completion still fits.
    """
    if max_prompt_tokens < 1:
        raise TaskError(f"sampling.max_tokens leaves no room for a prompt in the context ({max_prompt_tokens} tokens)")
    if config.name not in TASKS:
        raise TaskError(f"unknown task {config.name!r}; built-in tasks: {', '.join(TASKS)}")
    return TASKS[config.name](config, tokenizer, max_prompt_tokens)
