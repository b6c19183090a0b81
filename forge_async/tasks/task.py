"""What a task is: a source of prompts (token ids plus what the reward needs) that scores
a completion, and the helpers every task family shares."""

import random
from dataclasses import dataclass, field
from typing import Protocol
from collections.abc import Callable

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

    def demonstration(self, prompt: Prompt) -> str:
        """The completion text supervised fine-tuning imitates for `prompt` (apps/sft; the
        tokenizer's EOS follows it); a TaskError for a task with no single completion to imitate."""
        ...


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
        return known_tokens(tokenizer, tokenizer.encode(prompt), prompt)
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    # A list or a BatchEncoding, depending on the tokenizer.
    return known_tokens(tokenizer, list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded), prompt)


def known_tokens(
    tokenizer, ids: list[int], text: str | ChatMessages, what: str = "prompt", error: type[Exception] = TaskError
) -> list[int]:
    """`ids`, unless the tokenizer had no token for part of `text` (the tiny model's digit
    tokenizer reads digits only): the model would see unknown-token placeholders, not the text.
    `what` names the text in the `error` raised."""
    if tokenizer.unk_token_id is not None and tokenizer.unk_token_id in ids:
        raise error(
            f"the tokenizer has no tokens for part of the {what} {str(text)[:80]!r} "
            "(the tiny model's model.tiny.tokenizer=bytes reads any text)"
        )
    return ids


class Sampled(Protocol):
    """Tokens a model sampled and their text: a Completion, or one turn of an episode."""

    text: str
    token_ids: list[int]


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
