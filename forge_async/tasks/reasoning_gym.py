"""reasoning_gym: prompts from reasoning-gym's procedural datasets, scored by each dataset's own
`score_answer` (docs/tasks.md).

    task.name=reasoning_gym task.reasoning_gym.datasets='[{name: chain_sum}, {name: count_bits, weight: 0.5}]'

The training split is a composite of the named datasets (their weights, their generator
configs) generated from `seed`; the held-out split is the same mix generated from
`eval_seed`, and training never hands out a question the held-out split has. Entries are
generated on demand, as they are drawn. Each prompt is the entry's question as a user
message, after `system_prompt` when there is one; a completion's answer is the text of its
last `<answer_tag>` block (or the whole completion), and its reward is what the entry's
source dataset gives that answer.
"""

import difflib
import random
from dataclasses import replace
from typing import Any

from forge_async.data.episode import Completion
from forge_async.tasks.config import ReasoningGymConfig, ReasoningGymDataset
from forge_async.tasks.task import Prompt, TaskError, prompt_token_ids

KEY = "task.reasoning_gym"


def create_mix(config: ReasoningGymConfig, seed: int, size: int):
    """The composite dataset of `config`'s mix; bad names, keys or weights are one TaskError naming them."""
    import reasoning_gym  # imported where used: only runs of this task pay for it
    from reasoning_gym.composite import DatasetSpec
    from reasoning_gym.factory import DATASETS

    for i, dataset in enumerate(config.datasets):
        if dataset.name not in DATASETS:
            close = difflib.get_close_matches(dataset.name, DATASETS, n=3)
            hint = f"did you mean {', '.join(close)}?" if close else "reasoning_gym.factory.DATASETS lists them"
            raise TaskError(f"{KEY}.datasets[{i}].name={dataset.name!r}: no such reasoning-gym dataset; {hint}")
    specs = [DatasetSpec(d.name, d.weight, dict(d.config)) for d in config.datasets]
    try:
        return reasoning_gym.create_dataset("composite", size=size, seed=seed, datasets=specs)
    except (TypeError, ValueError, AssertionError) as err:
        raise TaskError(f"{KEY}.config: {type(err).__name__}: {err}") from None


def check_config(config: ReasoningGymConfig) -> None:
    """Fail at start naming the key if a dataset of the mix cannot generate an entry."""
    for i, dataset in enumerate(config.datasets):
        alone = replace(config, datasets=[ReasoningGymDataset(dataset.name, 1.0, dataset.config)])
        try:
            create_mix(alone, config.seed, size=1)[0]
        except TaskError as err:
            raise TaskError(str(err).replace(f"{KEY}.config:", f"{KEY}.datasets[{i}].config:", 1)) from None
        except Exception as err:  # a config the dataset accepts but cannot generate from
            raise TaskError(f"{KEY}.datasets[{i}].config: {type(err).__name__}: {err}") from None


class ReasoningGymTask:
    def __init__(self, config: ReasoningGymConfig, tokenizer, max_prompt_tokens: int):
        self.config = config
        self.name = "reasoning_gym:" + "+".join(d.name for d in config.datasets)
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.skipped_rows: dict[str, int] = {}  # generated: no rows to skip
        self.train = create_mix(config, config.seed, config.size)
        self._held_questions: set[str] = set()

    def sample(self, rng: random.Random) -> Prompt:
        while True:
            entry = self.train[rng.randrange(len(self.train))]
            if entry["question"] not in self._held_questions:
                return self._prompt(entry)

    def hold_out(self, count: int) -> list[Prompt]:
        """The first `count` entries of the mix generated from eval_seed; training skips their questions."""
        held = create_mix(self.config, self.config.eval_seed, count)
        entries = [held[i] for i in range(count)]
        self._held_questions = {e["question"] for e in entries}
        return [self._prompt(e) for e in entries]

    def _prompt(self, entry: dict[str, Any]) -> Prompt:
        messages = [{"role": "user", "content": entry["question"]}]
        if self.config.system_prompt:
            messages.insert(0, {"role": "system", "content": self.config.system_prompt})
        ids = prompt_token_ids(self.tokenizer, messages)
        if len(ids) > self.max_prompt_tokens:
            raise TaskError(
                f"{KEY}: a {entry['metadata']['source_dataset']} prompt is {len(ids)} tokens; the context "
                f"leaves {self.max_prompt_tokens} after sampling.max_tokens (question: {entry['question']!r})"
            )
        source = entry["metadata"]["source_dataset"]
        return Prompt(
            token_ids=ids, answer=entry["answer"], text=entry["question"], meta={"source": source, "entry": entry}
        )

    def extract_answer(self, text: str) -> str | None:
        """The completion's answer: its last <answer_tag> block (None without one), or all of it."""
        if self.config.answer_tag is None:
            return text.strip()
        from reasoning_gym.utils import extract_answer

        return extract_answer(text, tag_name=self.config.answer_tag)

    def reward(self, prompt: Prompt, completion: Completion) -> float:
        """What the entry's own dataset gives the extracted answer (reasoning-gym's score_answer)."""
        return float(self.train.score_answer(self.extract_answer(completion.text), prompt.meta["entry"]))

    def demonstration(self, prompt: Prompt) -> str:
        """The completion supervised fine-tuning imitates: the gold answer in the answer format."""
        tag = self.config.answer_tag
        return prompt.answer if tag is None else f"<{tag}>{prompt.answer}</{tag}>"
