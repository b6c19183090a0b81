"""Prompt sources with verifiable rewards.

A task hands out prompts (token ids plus whatever the reward needs) and scores a
completion. Built-in digit tasks need no downloads: a random tiny model starts
near chance on them and GRPO alone lifts it (see docs/tasks.md for the measured
step counts). `forge_async.data.dataset.DatasetTask` reads prompts from local
files with Hugging Face `datasets`.
"""

import importlib
import random
from dataclasses import dataclass, field
from typing import Callable, Protocol

from forge_async.config_checks import Range, check_range
from forge_async.data.episode import Completion
from forge_async.errors import UserError


@dataclass
class Prompt:
    token_ids: list[int]
    answer: str  # what the reward function checks against
    text: str = ""
    meta: dict = field(default_factory=dict)


class Task(Protocol):
    name: str
    skipped_rows: dict[str, int]  # dataset rows skipped at load, by reason ({} for other tasks)

    def sample(self, rng: random.Random) -> Prompt: ...

    def hold_out(self, count: int) -> list[Prompt]:
        """Set `count` prompts aside for evaluation (the same ones in every run); `sample` never
        hands them out from then on."""
        ...

    def reward(self, prompt: Prompt, completion: Completion) -> float: ...


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
    reward_fn: str = "forge_async.data.tasks:exact_match"  # "module:function" for datasets

    def __post_init__(self) -> None:
        check_range(
            "task.min_digits", self.min_digits, Range(1, self.num_digits), nullable=True,
            note="at most task.num_digits",
        )


MULTI_TURN_TASKS = ("tool_lookup",)  # built-in tasks that bring an environment (forge_async/envs/)


class TaskError(UserError):
    """A task that cannot be built: unknown name, missing or malformed dataset, bad reward fn."""


ChatMessages = list[dict[str, str]]


def prompt_token_ids(tokenizer, prompt: str | ChatMessages) -> list[int]:
    """The prompt as the model sees it.

    With a chat template: the messages (a text prompt is one user message) rendered with
    the generation prompt added. Without one: a text prompt encoded as it is.
    """
    if not tokenizer.chat_template:
        if not isinstance(prompt, str):
            raise TaskError("chat-message prompts need a tokenizer with a chat template")
        return tokenizer.encode(prompt)
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    # A list or a BatchEncoding, depending on the tokenizer.
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


class Sampled(Protocol):
    """Tokens a model sampled and their text: a Completion, or one turn of an episode."""

    text: str
    token_ids: list[int]


def single_digit_reward(answer: str, completion: Sampled, eos_id: int) -> float:
    """1 for the right digit then EOS, 0.5 for the right digit without EOS, 0 otherwise."""
    if not completion.text or completion.text[0] != answer:
        return 0.0
    ended = len(completion.token_ids) >= 2 and completion.token_ids[1] == eos_id
    return 1.0 if ended else 0.5


def copied_fraction(answer: str, completion: Completion, eos_id: int) -> float:
    """The fraction of the answer's characters the completion has at the same position, times
    0.5 if the completion does not end with EOS right after the answer's length."""
    matched = sum(a == b for a, b in zip(answer, completion.text)) / len(answer)
    ended = len(completion.token_ids) > len(answer) and completion.token_ids[len(answer)] == eos_id
    return matched if ended else 0.5 * matched


HELD_OUT_SEED = 7919  # fixed, not the run's seed: every run of a task evaluates on the same prompts


class HeldOutSplit:
    """A generated task's prompts, split: those set aside for evaluation, drawn once from a fixed
    seed, and the rest, which training samples from. `distinct`: how many different prompts the
    task can make (None: too many to matter)."""

    def __init__(self, draw: Callable[[random.Random], Prompt], task_name: str, distinct: int | None = None):
        self.draw, self.task_name, self.distinct = draw, task_name, distinct
        self.held: dict[tuple, Prompt] = {}

    def hold_out(self, count: int) -> list[Prompt]:
        if self.distinct is not None and count > self.distinct // 2:
            raise TaskError(
                f"eval.prompts={count} would hold out more than half of task {self.task_name}'s "
                f"{self.distinct} distinct prompts; lower eval.prompts, or eval.every_steps=0 turns evaluation off"
            )
        rng = random.Random(HELD_OUT_SEED)
        while len(self.held) < count:
            prompt = self.draw(rng)
            self.held.setdefault(_identity(prompt), prompt)
        return list(self.held.values())

    def sample(self, rng: random.Random) -> Prompt:
        """A training prompt: drawn as the task draws them, redrawn while it is a held-out one."""
        while True:
            prompt = self.draw(rng)
            if _identity(prompt) not in self.held:
                return prompt


def _identity(prompt: Prompt) -> tuple:
    return prompt.text, prompt.answer, repr(sorted(prompt.meta.items()))


# The answer each built-in task computes from the prompt's digits.
DIGIT_RULES: dict[str, Callable[[list[int]], object]] = {
    "max_digit": max,
    "first_digit": lambda digits: digits[0],
    "copy_digits": lambda digits: "".join(map(str, digits)),  # long completions: n digits + EOS
}


_CACHED_PROMPTS = 4096


class DigitTask:
    """Prompt = BOS d1..dn SEP, n from min_digits to num_digits; the answer is computed from the
    prompt's digits (`DIGIT_RULES`)."""

    def __init__(
        self, name: str, num_digits: int, tokenizer, max_prompt_tokens: int, min_digits: int | None = None
    ):
        rules = DIGIT_RULES
        if name not in rules:
            raise TaskError(
                f"unknown task {name!r}; built-in tasks: {', '.join(rules)}, tool_lookup, or 'dataset'"
            )
        if num_digits < 1:
            raise TaskError(f"task.num_digits must be >= 1, got {num_digits}")
        prompt_tokens = len(prompt_token_ids(tokenizer, "9" * num_digits))
        if prompt_tokens > max_prompt_tokens:
            raise TaskError(
                f"task.num_digits={num_digits} makes {prompt_tokens}-token prompts; the context "
                f"leaves {max_prompt_tokens} after sampling.max_tokens"
            )
        self.name, self.num_digits, self.rule = name, num_digits, rules[name]
        self.min_digits = num_digits if min_digits is None else min_digits
        self.tokenizer = tokenizer
        self._prompt_ids: dict[str, list[int]] = {}
        self.skipped_rows: dict[str, int] = {}  # prompts are generated: no rows to skip
        self.split = HeldOutSplit(self._draw, name, sum(10**n for n in range(self.min_digits, num_digits + 1)))

    def sample(self, rng: random.Random) -> Prompt:
        return self.split.sample(rng)

    def hold_out(self, count: int) -> list[Prompt]:
        return self.split.hold_out(count)

    def _draw(self, rng: random.Random) -> Prompt:
        n = self.num_digits
        if self.min_digits < n:  # a fixed count draws nothing: a seed's prompts stay those of a fixed-length task
            n = rng.randint(self.min_digits, n)
        digits = [rng.randrange(10) for _ in range(n)]
        text = "".join(map(str, digits))
        return Prompt(token_ids=self._token_ids(text), answer=str(self.rule(digits)), text=text)

    def _token_ids(self, text: str) -> list[int]:
        """The prompt's tokens, the first `_CACHED_PROMPTS` distinct ones remembered: rendering the
        chat template is on the controller's path to each generate call, and a digit task of a
        few digits draws the same prompts over and over (10**n of n digits; docs/benchmarks.md,
        pipeline)."""
        ids = self._prompt_ids.get(text)
        if ids is None:
            ids = prompt_token_ids(self.tokenizer, text)
            if len(self._prompt_ids) < _CACHED_PROMPTS:
                self._prompt_ids[text] = ids
        return list(ids)

    def reward(self, prompt: Prompt, completion: Completion) -> float:
        if self.name == "copy_digits":
            return copied_fraction(prompt.answer, completion, self.tokenizer.eos_token_id)
        return single_digit_reward(prompt.answer, completion, self.tokenizer.eos_token_id)


def exact_match(answer: str, completion_text: str) -> float:
    """Default reward for datasets: 1 if the completion (stripped) equals the answer."""
    return float(completion_text.strip() == answer.strip())


def load_callable(spec: str, key: str) -> Callable:
    """The callable `spec` ("module:function") names; a TaskError naming `key` if there is none
    (task.reward_fn, scorers[i].fn, env.name)."""
    module_name, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as err:
        raise TaskError(f"{key} {spec!r} cannot be imported: {err}") from err
    if not callable(fn):
        raise TaskError(f"{key} {spec!r} is not callable")
    return fn


def build_task(config: TaskConfig, tokenizer, max_prompt_tokens: int) -> Task:
    """The task `config` names, every prompt checked to fit in `max_prompt_tokens`.

    `max_prompt_tokens` is the context length minus sampling.max_tokens: what a prompt
    may take so that a full-length completion still fits.
    """
    if max_prompt_tokens < 1:
        raise TaskError(
            f"sampling.max_tokens leaves no room for a prompt in the context ({max_prompt_tokens} tokens)"
        )
    if config.name == "tool_lookup":  # multi-turn: its environment is in forge_async/envs/
        from forge_async.envs.tool_lookup import ToolLookupTask

        return ToolLookupTask(tokenizer, max_prompt_tokens)
    if config.name != "dataset":
        return DigitTask(config.name, config.num_digits, tokenizer, max_prompt_tokens, config.min_digits)
    if not config.dataset:
        raise TaskError(
            "task.name=dataset needs task.dataset=<.jsonl/.json/.parquet/.csv file or save_to_disk directory>"
        )
    # Imported here: dataset.py builds on this module, and `datasets` takes seconds to import.
    from forge_async.data.dataset import DatasetTask

    task = DatasetTask(config, tokenizer, max_prompt_tokens)
    print(task.load_report())
    return task
