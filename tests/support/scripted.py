"""Stand-ins for the generator in runner and endpoint tests: each turn's text is scripted."""

from forge_async.data.episode import Completion
from forge_async.generation.config import SamplingConfig
from forge_async.models.tokenizer import build_byte_tokenizer
from tests.support.digits import EOS_ID

BYTES = build_byte_tokenizer()


class ScriptedModel:
    """Digit tokens: turn k says `turns[k]` (then EOS), sampled by policy version `versions[k]`."""

    def __init__(self, turns: list[str], versions: list[int]):
        self.turns, self.versions, self.prompts, self.budgets = turns, versions, [], []

    async def __call__(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        k = len(self.prompts)
        self.prompts.append(prompt_ids)
        self.budgets.append(sampling.max_tokens)
        ids = ([int(c) for c in self.turns[k]] + [EOS_ID])[: sampling.max_tokens]
        finish = "stop" if ids[-1] == EOS_ID else "length"
        text = "".join(str(i) for i in ids if i < 10)
        return Completion(prompt_ids, ids, [-0.5] * len(ids), [self.versions[k]] * len(ids), text, finish)


class ScriptedText:
    """Byte tokens: turn k says `turns[k]`, then EOS."""

    def __init__(self, turns: list[str]):
        self.turns = turns
        self.calls = 0

    async def __call__(self, prompt_ids: list[int], sampling: SamplingConfig) -> Completion:
        text = self.turns[self.calls]
        self.calls += 1
        ids = BYTES.encode(text, add_special_tokens=False) + [BYTES.eos_token_id]
        return Completion(prompt_ids, ids, [-0.1] * len(ids), [0] * len(ids), text, "stop")
