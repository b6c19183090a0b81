"""Prompt sets from local files, read with Hugging Face `datasets` and checked at load.

`task.dataset` is a .jsonl / .json, .parquet or .csv file, or a directory written by
`Dataset.save_to_disk`. Each row gives a prompt (`task.prompt_column`: text, or a list of
chat messages) and an answer (`task.answer_column`). Every row is checked before the run
starts, so a bad row costs a second at start rather than a crash mid-run: a missing
value, an empty prompt, or a prompt that leaves no room for sampling.max_tokens in the
context stops the load with one error naming the file and row, or, with
`task.skip_bad_rows=true`, is skipped and counted by reason (summary.json `skipped_rows`).
A text file (.jsonl, .json, .csv) must be UTF-8; the first line that is not is named.
"""

import logging
import random
import tempfile
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import datasets

from forge_async.data.episode import Completion
from forge_async.config.callables import load_callable
from forge_async.tasks.config import TaskConfig
from forge_async.tasks.task import HELD_OUT_SEED, ChatMessages, Prompt, TaskError, prompt_token_ids

# The `datasets` builder for each file suffix; a directory is read with load_from_disk.
BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
TEXT_SUFFIXES = (".jsonl", ".json", ".csv")  # read as UTF-8 text
SKIP_REASONS = ("missing_column", "empty_prompt", "too_long")


class BadRow(Exception):
    """A row that `task.skip_bad_rows` may skip; `reason` is one of SKIP_REASONS."""

    def __init__(self, reason: str, problem: str):
        super().__init__(problem)
        self.reason = reason


class DatasetTask:
    """Prompts from a local dataset, checked at load and sampled uniformly at random."""

    def __init__(self, config: TaskConfig, tokenizer, max_prompt_tokens: int, key: str = "task.dataset"):
        """`key`: the config key that named `config.dataset`, as errors name it (eval.dataset too)."""
        self.name = f"dataset:{dataset_path(config, key).name}"
        self.score = load_callable(config.reward_fn, "task.reward_fn")
        self.reward_fn_name = config.reward_fn
        rows = read_rows(config, key)
        self.rows_read = len(rows)
        self.prompts, self.skipped_rows = load_prompts(rows, config, tokenizer, max_prompt_tokens)

    def load_report(self) -> str:
        """One console line: how many rows were kept, and why any were skipped."""
        kept = f"dataset: kept {len(self.prompts)} of {self.rows_read} rows"
        skipped = _describe_counts(self.skipped_rows)
        return f"{kept} (skipped: {skipped})" if skipped else kept

    def sample(self, rng: random.Random) -> Prompt:
        return rng.choice(self.prompts)

    def hold_out(self, count: int) -> list[Prompt]:
        """`count` rows, picked with a fixed seed (the same in every run), taken out of training."""
        if count > len(self.prompts) // 2:
            raise TaskError(
                f"eval.prompts={count} would hold out more than half of the {len(self.prompts)} prompts "
                f"of {self.name}; lower eval.prompts, or give a held-out file as eval.dataset"
            )
        order = list(range(len(self.prompts)))
        random.Random(HELD_OUT_SEED).shuffle(order)
        held = set(order[:count])
        kept = [p for i, p in enumerate(self.prompts) if i not in held]
        evaluated = [self.prompts[i] for i in sorted(held)]
        self.prompts = kept
        return evaluated

    def demonstration(self, prompt: Prompt) -> str:
        """The row's answer, as written (task.answer_column)."""
        return prompt.answer

    def reward(self, prompt: Prompt, completion: Completion) -> float:
        try:
            return float(self.score(prompt.answer, completion.text))
        except Exception as err:
            raise TaskError(
                f"reward function {self.reward_fn_name} raised {type(err).__name__}: {err} "
                f"(prompt {prompt.text!r}, completion {completion.text!r})"
            ) from err


def dataset_path(config: TaskConfig, key: str = "task.dataset") -> Path:
    """`config.dataset` (named by `key`) as a path; a TaskError where it names none."""
    if config.dataset is None:
        raise TaskError(f"{key} is null: name a .jsonl/.json/.parquet/.csv file or save_to_disk directory")
    return Path(config.dataset)


def read_rows(config: TaskConfig, key: str = "task.dataset") -> datasets.Dataset:
    """The rows of `config.dataset` (named by `key`), held in memory; a failure to read it is one TaskError."""
    path = dataset_path(config, key)
    if not path.exists():
        raise TaskError(f"{key} not found: {path}")
    if path.is_file() and path.suffix not in BUILDERS:
        raise TaskError(
            f"{key} {path}: unsupported file type {path.suffix!r} "
            f"(use {', '.join(BUILDERS)}, or a save_to_disk directory)"
        )
    if path.is_file() and path.stat().st_size == 0:
        raise TaskError(f"{key} {path} has no rows (the file is empty)")
    if path.suffix in TEXT_SUFFIXES and path.is_file():
        _check_utf8(path, key)
    try:
        with _quiet_datasets():
            if path.is_dir():
                rows = datasets.load_from_disk(str(path), keep_in_memory=True)
            else:
                rows = _load_file(path, config)
    except Exception as err:  # datasets, pyarrow and pandas each raise their own kinds
        raise TaskError(f"{key} {path} cannot be read: {_innermost(err)}") from err
    _check_shape(rows, path, config, key)
    return rows


def _check_utf8(path: Path, key: str) -> None:
    """Name the first line that is not UTF-8: `datasets` would fail without saying where."""
    with path.open("rb") as file:
        for number, line in enumerate(file, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise TaskError(
                    f"{key} {path}: line {number} is not valid UTF-8 "
                    f"(0x{line[err.start]:02x} at byte {err.start + 1} of the line); save the file as UTF-8"
                ) from None


def _load_file(path: Path, config: TaskConfig) -> datasets.Dataset:
    builder = BUILDERS[path.suffix]
    builder_options: dict[str, dict[str, Any]] = {
        # Without its mixed-types scan, the JSON builder reads a row that lacks a key as
        # None (the scan fails on such rows and on blank lines).
        "json": {"on_mixed_types": None},
        # Prompt and answer cells as written ("007" stays "007", "NA" stays "NA"); only an
        # empty cell counts as no value.
        "csv": {
            "converters": {config.prompt_column: str, config.answer_column: str},
            "keep_default_na": False,
            "na_values": [""],
        },
    }
    options = builder_options.get(builder, {})
    # A throwaway cache: a local file read once is not worth an Arrow copy in ~/.cache.
    with tempfile.TemporaryDirectory() as cache_dir:
        return datasets.load_dataset(
            builder, data_files=str(path), split="train", cache_dir=cache_dir, keep_in_memory=True, **options
        )


def _check_shape(rows: datasets.Dataset | datasets.DatasetDict, path: Path, config: TaskConfig, key: str) -> None:
    """One split, some rows, and both columns the config names."""
    if isinstance(rows, datasets.DatasetDict):
        raise TaskError(
            f"{key} {path} holds several splits ({', '.join(rows)}); "
            f"point it at one split's directory, e.g. {path / next(iter(rows))}"
        )
    if len(rows) == 0:
        raise TaskError(f"{key} {path} has no rows")
    for column_key in ("prompt_column", "answer_column"):
        column = getattr(config, column_key)
        if column not in rows.column_names:
            raise TaskError(
                f"{key} {path} has no column {column!r} (task.{column_key}); "
                f"its columns: {', '.join(rows.column_names)}"
            )


@contextmanager
def _quiet_datasets() -> Iterator[None]:
    """No progress bars or log lines from `datasets`: its failures become one TaskError."""
    verbosity, bars_were_off = datasets.logging.get_verbosity(), datasets.are_progress_bars_disabled()
    datasets.logging.set_verbosity(logging.CRITICAL)
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.logging.set_verbosity(verbosity)
        if not bars_were_off:
            datasets.enable_progress_bars()


def _innermost(err: BaseException) -> str:
    """datasets wraps parse errors (DatasetGenerationError); the innermost says what is wrong."""
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err) or type(err).__name__


def load_prompts(
    rows: datasets.Dataset, config: TaskConfig, tokenizer, max_prompt_tokens: int
) -> tuple[list[Prompt], dict[str, int]]:
    """Each row as a Prompt, and the rows skipped by reason (all zero unless skip_bad_rows)."""
    prompts, skipped = [], dict.fromkeys(SKIP_REASONS, 0)
    for number, row in enumerate(rows, start=1):
        try:
            prompts.append(row_prompt(row, config, tokenizer, max_prompt_tokens))
        except BadRow as bad:
            if not config.skip_bad_rows:
                raise TaskError(
                    f"{config.dataset}: row {number}: {bad} (task.skip_bad_rows=true skips such rows)"
                ) from None
            skipped[bad.reason] += 1
        except TaskError as err:  # a row no setting can make usable
            raise TaskError(f"{config.dataset}: row {number}: {err}") from None
    if not prompts:
        raise TaskError(f"{config.dataset}: every row was skipped ({_describe_counts(skipped)})")
    return prompts, skipped


def row_prompt(row: dict, config: TaskConfig, tokenizer, max_prompt_tokens: int) -> Prompt:
    prompt, answer = row[config.prompt_column], row[config.answer_column]
    for column, value in ((config.prompt_column, prompt), (config.answer_column, answer)):
        if value is None:
            raise BadRow("missing_column", f"no value in column {column!r}")
    if not (isinstance(prompt, str) or _is_chat(prompt)):
        raise TaskError(
            f"column {config.prompt_column!r} holds {type(prompt).__name__} {prompt!r}; "
            "a prompt is text or a list of chat messages ({role, content})"
        )
    text = _prompt_text(prompt)
    if not text.strip():
        raise BadRow("empty_prompt", "the prompt is empty")
    token_ids = prompt_token_ids(tokenizer, prompt)
    if len(token_ids) > max_prompt_tokens:
        raise BadRow(
            "too_long",
            f"the prompt is {len(token_ids)} tokens; the context leaves {max_prompt_tokens} after sampling.max_tokens",
        )
    return Prompt(token_ids=token_ids, answer=str(answer), text=text)


def _is_chat(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(message, dict) and "role" in message and "content" in message for message in value
    )


def _prompt_text(prompt: str | ChatMessages) -> str:
    """A text prompt as it is; chat messages' contents joined by newlines."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(message["content"] or "" for message in prompt)


def _describe_counts(skipped: dict[str, int]) -> str:
    """'empty_prompt 1, too_long 2': the reasons that occurred."""
    return ", ".join(f"{reason} {n}" for reason, n in skipped.items() if n)
