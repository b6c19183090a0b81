"""Prompt sources with verifiable rewards.

A task hands out prompts (token ids plus whatever the reward needs) and scores a
completion. Built-in digit tasks need no downloads: a random tiny model starts
near chance on them and GRPO alone lifts it (see docs/tasks.md for the measured
step counts). `DatasetTask` reads prompts from a local JSONL/Parquet file.
"""

import importlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from forge_async.data.episode import Completion


@dataclass
class Prompt:
    token_ids: list[int]
    answer: str  # what the reward function checks against
    text: str = ""
    meta: dict = field(default_factory=dict)


class Task(Protocol):
    name: str

    def sample(self, rng: random.Random) -> Prompt: ...

    def reward(self, prompt: Prompt, completion: Completion) -> float: ...


@dataclass
class TaskConfig:
    name: str = "max_digit"  # max_digit | first_digit | dataset
    num_digits: int = 3
    dataset: str | None = None  # local .jsonl / .parquet with `prompt` and `answer` columns
    reward_fn: str = "forge_async.data.tasks:exact_match"  # "module:function" for datasets


class TaskError(ValueError):
    """A task that cannot be built: unknown name, missing or malformed dataset, bad reward fn."""


def single_digit_reward(answer: str, completion: Completion, eos_id: int) -> float:
    """1 for the right digit then EOS, 0.5 for the right digit without EOS, 0 otherwise."""
    if not completion.text or completion.text[0] != answer:
        return 0.0
    ended = len(completion.token_ids) >= 2 and completion.token_ids[1] == eos_id
    return 1.0 if ended else 0.5


class DigitTask:
    """Prompt = BOS d1..dn SEP; the answer is one digit computed from the prompt's digits."""

    def __init__(self, name: str, num_digits: int, tokenizer):
        rules = {"max_digit": max, "first_digit": lambda digits: digits[0]}
        if name not in rules:
            raise TaskError(f"unknown task {name!r}; built-in tasks: {', '.join(rules)}, or 'dataset'")
        if num_digits < 1:
            raise TaskError(f"task.num_digits must be >= 1, got {num_digits}")
        self.name, self.num_digits, self.rule = name, num_digits, rules[name]
        self.tokenizer = tokenizer

    def sample(self, rng: random.Random) -> Prompt:
        digits = [rng.randrange(10) for _ in range(self.num_digits)]
        text = "".join(map(str, digits))
        ids = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        return Prompt(token_ids=list(_ids(ids)), answer=str(self.rule(digits)), text=text)

    def reward(self, prompt: Prompt, completion: Completion) -> float:
        return single_digit_reward(prompt.answer, completion, self.tokenizer.eos_token_id)


def exact_match(answer: str, completion_text: str) -> float:
    """Default reward for datasets: 1 if the completion (stripped) equals the answer."""
    return float(completion_text.strip() == answer.strip())


def load_reward_fn(spec: str) -> Callable[[str, str], float]:
    module_name, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise TaskError(f"task.reward_fn {spec!r} cannot be imported: {err}") from err
    if not callable(fn):
        raise TaskError(f"task.reward_fn {spec!r} is not callable")
    return fn


class DatasetTask:
    """Prompts from a local JSONL or Parquet file, sampled uniformly at random."""

    def __init__(self, path: str, reward_fn: str, tokenizer):
        self.name = f"dataset:{Path(path).name}"
        self.rows = _read_rows(path)
        self.score = load_reward_fn(reward_fn)
        self.reward_fn_name = reward_fn
        self.prompts = [self._prompt(i, row, tokenizer, path) for i, row in enumerate(self.rows)]

    @staticmethod
    def _prompt(index: int, row: dict, tokenizer, path: str) -> Prompt:
        if not isinstance(row.get("prompt"), str) or row.get("answer") is None:
            raise TaskError(
                f"{path}: row {index + 1} needs a string 'prompt' and an 'answer'; got {row!r}"
            )
        if tokenizer.chat_template:
            ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": row["prompt"]}], add_generation_prompt=True, tokenize=True
            )
        else:
            ids = tokenizer.encode(row["prompt"])
        return Prompt(token_ids=list(_ids(ids)), answer=str(row["answer"]), text=row["prompt"])

    def sample(self, rng: random.Random) -> Prompt:
        return rng.choice(self.prompts)

    def reward(self, prompt: Prompt, completion: Completion) -> float:
        try:
            return float(self.score(prompt.answer, completion.text))
        except Exception as err:
            raise TaskError(
                f"reward function {self.reward_fn_name} raised {type(err).__name__}: {err} "
                f"(prompt {prompt.text!r}, completion {completion.text!r})"
            ) from err


def _ids(encoded) -> list[int]:
    """apply_chat_template returns a list or a BatchEncoding depending on the tokenizer."""
    return encoded["input_ids"] if hasattr(encoded, "keys") else encoded


def _read_rows(path: str) -> list[dict]:
    file = Path(path)
    if not file.is_file():
        raise TaskError(f"task.dataset file not found: {file}")
    if file.suffix in (".jsonl", ".json"):
        rows = _read_jsonl(file)
    elif file.suffix == ".parquet":
        import datasets

        try:
            rows = list(datasets.load_dataset("parquet", data_files=str(file), split="train"))
        except Exception as err:
            raise TaskError(f"task.dataset {file} cannot be read: {err}") from err
    else:
        raise TaskError(f"task.dataset {file}: unsupported file type {file.suffix!r} (use .jsonl or .parquet)")
    if not rows:
        raise TaskError(f"task.dataset {file} has no rows")
    return rows


def _read_jsonl(file: Path) -> list[dict]:
    """One JSON object per non-empty line; errors name the line (rows are counted as lines)."""
    rows = []
    for number, line in enumerate(file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise TaskError(f"{file}: row {number} is not valid JSON: {err}") from err
    return rows


def build_task(config: TaskConfig, tokenizer) -> Task:
    if config.name == "dataset":
        if not config.dataset:
            raise TaskError("task.name=dataset needs task.dataset=<path to .jsonl or .parquet>")
        return DatasetTask(config.dataset, config.reward_fn, tokenizer)
    return DigitTask(config.name, config.num_digits, tokenizer)
