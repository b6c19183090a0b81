"""Demonstrations as episodes: what supervised fine-tuning (apps.sft) trains on.

A demonstration is a training prompt of the task and the completion to imitate: the text
`task.demonstration(prompt)` gives (a dataset row's answer, a reasoning-gym answer in its
answer tag, a digit task's answer), encoded as it is, then the tokenizer's EOS. As an
Episode it takes the trainer's own path (packing, prompt sharing, micro-batches, dtype, LR
schedule) with the sft objective (losses/sft.py), which reads only its tokens:

    completion.token_ids  the demonstration's tokens + EOS (the tokens the loss is over)
    completion.logprobs   0 each (no policy sampled them)
    completion.versions   the trainer's current version (they are never stale)
    advantage             1 (reward 0: nothing scored them)
"""

import random

from forge_async.data.episode import Completion, Episode
from forge_async.errors import UserError
from forge_async.tasks.task import Prompt, Task, known_tokens


class DemonstrationError(UserError):
    """A demonstration that cannot be trained on: no tokens for its text, or too long."""


def demonstration_ids(text: str, tokenizer) -> list[int]:
    """The completion SFT imitates: `text`'s tokens (no special tokens added), then EOS."""
    encoded = list(tokenizer.encode(text, add_special_tokens=False))
    return known_tokens(tokenizer, encoded, text, "demonstration", DemonstrationError) + [tokenizer.eos_token_id]


def demonstration_episode(
    prompt_ids: list[int], completion_ids: list[int], text: str, version: int, group_id: int
) -> Episode:
    """One demonstration as an episode the trainer learns from at `version` (see the module's table)."""
    n = len(completion_ids)
    completion = Completion(
        prompt_ids=list(prompt_ids),
        token_ids=list(completion_ids),
        logprobs=[0.0] * n,
        versions=[version] * n,
        text=text,
        finish_reason="stop",
    )
    return Episode(completion=completion, reward=0.0, advantage=1.0, group_id=group_id)


class Demonstrations:
    """A task's training prompts with their demonstrations, drawn with replacement from an RNG of
    `seed` (a resumed run continues the draws: `state_dict`).

    A demonstration longer than `max_tokens` (sampling.max_tokens, the completion budget the
    prompts were checked to leave room for) fails the run naming it, or with `skip_too_long`
    (task.skip_bad_rows) is skipped and counted (`skipped`)."""

    def __init__(self, task: Task, tokenizer, max_tokens: int, seed: int, skip_too_long: bool = False):
        self.task = task
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.skip_too_long = skip_too_long
        self.rng = random.Random(seed)
        self.seed = seed
        self.drawn = 0  # demonstrations handed out
        self.tokens = 0  # their completion tokens (EOS included)
        self.skipped = {"too_long": 0}
        self._next_group = 0

    def check(self) -> None:
        """Fail now, not at the first step, for a task with no single completion to imitate (the
        task's TaskError), or demonstrations the tokenizer cannot encode or the budget cannot hold:
        one prompt probed, with an RNG of its own (the draws of `batch` are not moved)."""
        prompt = self.task.sample(random.Random(self.seed))
        ids = demonstration_ids(self.task.demonstration(prompt), self.tokenizer)
        if not self.skip_too_long:
            self._check_length(prompt, ids)

    def batch(self, size: int, version: int) -> list[Episode]:
        """`size` demonstrations as episodes for the trainer at `version`."""
        episodes: list[Episode] = []
        attempts = 0
        while len(episodes) < size:
            attempts += 1
            if attempts > 10 * size + 100:
                raise DemonstrationError(
                    f"{self.skipped['too_long']} demonstrations skipped as longer than sampling.max_tokens="
                    f"{self.max_tokens} and too few fit; raise sampling.max_tokens"
                )
            episode = self._episode(self.task.sample(self.rng), version)
            if episode is not None:
                episodes.append(episode)
        self.drawn += len(episodes)
        self.tokens += sum(len(e.completion.token_ids) for e in episodes)
        return episodes

    def _episode(self, prompt: Prompt, version: int) -> Episode | None:
        text = self.task.demonstration(prompt)
        ids = demonstration_ids(text, self.tokenizer)
        if len(ids) > self.max_tokens and self.skip_too_long:
            self.skipped["too_long"] += 1
            return None
        self._check_length(prompt, ids)
        self._next_group += 1
        return demonstration_episode(prompt.token_ids, ids, text, version, self._next_group - 1)

    def _check_length(self, prompt: Prompt, ids: list[int]) -> None:
        if len(ids) > self.max_tokens:
            raise DemonstrationError(
                f"the demonstration of prompt {prompt.text[:60]!r} is {len(ids)} tokens with EOS, more than "
                f"sampling.max_tokens={self.max_tokens} (the completion budget; raise it, or "
                "task.skip_bad_rows=true skips such prompts)"
            )

    def state_dict(self) -> dict:
        return {
            "rng": self.rng.getstate(),
            "drawn": self.drawn,
            "tokens": self.tokens,
            "skipped": dict(self.skipped),
            "next_group": self._next_group,
        }

    def load_state_dict(self, state: dict) -> None:
        self.rng.setstate(state["rng"])
        self.drawn, self.tokens = state["drawn"], state["tokens"]
        self.skipped, self._next_group = dict(state["skipped"]), state["next_group"]
