"""Built-in digit tasks: max_digit, first_digit, copy_digits.

They need no downloads: a random tiny model starts near chance on them and GRPO
alone lifts it (docs/tasks.md has the measured step counts).
"""

import random
from collections.abc import Callable

from forge_async.data.episode import Completion
from forge_async.tasks.task import HeldOutSplit, Prompt, Sampled, TaskError, prompt_token_ids


def single_digit_reward(answer: str, completion: Sampled, eos_id: int | None) -> float:
    """1 for the right digit then EOS, 0.5 for the right digit without EOS, 0 otherwise (`eos_id`
    None: not known, so no completion counts as ended)."""
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

    def __init__(self, name: str, num_digits: int, tokenizer, max_prompt_tokens: int, min_digits: int | None = None):
        rules = DIGIT_RULES
        if name not in rules:
            raise TaskError(f"unknown task {name!r}; built-in tasks: {', '.join(rules)}, tool_lookup, or 'dataset'")
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

    def demonstration(self, prompt: Prompt) -> str:
        return prompt.answer
