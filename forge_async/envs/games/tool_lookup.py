"""tool_lookup: a two-turn task that cannot be solved without its environment.

Each prompt names a key (one digit) and comes with a hidden table mapping every key
to a random value (a digit), drawn anew for each prompt:

    prompt        <bos> 4 <sep>
    model turn 1  the lookup call: a key digit, then EOS         "4<eos>"
    environment   the value stored under the called key          "7<sep>"
    model turn 2  the answer: that value, then EOS               "7<eos>"

The value appears nowhere but in the environment's reply, so a model that does not
call the tool, or calls it with another key, answers right by chance only (1 in 10).
A call that is not one digit then EOS is malformed: the episode ends there.

Reward, at most 1, in parts a model starting from chance can learn one after another:

    CALL_FORMAT_REWARD  a well-formed call
    KEY_REWARD          ... naming the prompt's key
    ECHO_REWARD         an answer that repeats the tool's reply (whichever key was called)
    ANSWER_REWARD       an answer that is the prompt's key's value

Each answer part counts in full for the digit then EOS, half for the digit without EOS.
"""

import random
from functools import partial

from forge_async.data.episode import Completion
from forge_async.tasks.digits import single_digit_reward
from forge_async.tasks.task import HeldOutSplit, Prompt, TaskError, prompt_token_ids
from forge_async.envs.environment import EnvStep, ModelTurn, Observation

CALL_FORMAT_REWARD = 0.1
KEY_REWARD = 0.2
ECHO_REWARD = 0.2
ANSWER_REWARD = 0.5
_PROMPT_TOKENS = 3  # <bos> key <sep>


class ToolLookupEnv:
    """One episode: answers the model's lookup call from the prompt's hidden table, then scores
    its answer."""

    def __init__(self, eos_id: int | None):
        """`eos_id`: the policy's end-of-sequence token (None, where a client did not say it: no turn ends well)."""
        self.eos_id = eos_id

    def reset(self, prompt: Prompt) -> Observation:
        self.key, self.table = prompt.meta["key"], prompt.meta["table"]
        return prompt.token_ids

    def step(self, turn: ModelTurn) -> EnvStep:
        return self._lookup(turn) if turn.index == 0 else self._answer(turn)

    def _lookup(self, turn: ModelTurn) -> EnvStep:
        well_formed = len(turn.token_ids) == 2 and turn.token_ids[1] == self.eos_id and turn.text.isdigit()
        if not well_formed:
            return EnvStep(done=True)
        self.reply = str(self.table[int(turn.text)])
        reward = CALL_FORMAT_REWARD + (KEY_REWARD if int(turn.text) == self.key else 0.0)
        return EnvStep(observation=self.reply, reward=reward)

    def _answer(self, turn: ModelTurn) -> EnvStep:
        echo = single_digit_reward(self.reply, turn, self.eos_id)
        right = single_digit_reward(str(self.table[self.key]), turn, self.eos_id)
        return EnvStep(reward=ECHO_REWARD * echo + ANSWER_REWARD * right, done=True)


class ToolLookupTask:
    name = "tool_lookup"

    def __init__(self, tokenizer, max_prompt_tokens: int):
        if max_prompt_tokens < _PROMPT_TOKENS:
            raise TaskError(
                f"task.name=tool_lookup needs {_PROMPT_TOKENS}-token prompts; the context leaves "
                f"{max_prompt_tokens} after sampling.max_tokens"
            )
        self.tokenizer = tokenizer
        self.skipped_rows: dict[str, int] = {}
        # A partial, not a method: it travels light to environment procs (env.procs).
        self.new_environment = partial(ToolLookupEnv, tokenizer.eos_token_id)
        self.split = HeldOutSplit(self._draw, self.name)  # 10^11 distinct prompts (key, table)

    def sample(self, rng: random.Random) -> Prompt:
        return self.split.sample(rng)

    def hold_out(self, count: int) -> list[Prompt]:
        return self.split.hold_out(count)

    def _draw(self, rng: random.Random) -> Prompt:
        key, table = rng.randrange(10), [rng.randrange(10) for _ in range(10)]
        ids = prompt_token_ids(self.tokenizer, str(key))
        return Prompt(token_ids=ids, answer=str(table[key]), text=str(key), meta={"key": key, "table": table})

    def reward(self, prompt: Prompt, completion: Completion) -> float:
        """The environment's: the episode's step rewards, summed."""
        return completion.played_reward

    def demonstration(self, prompt: Prompt) -> str:
        raise TaskError("tool_lookup plays two turns with its environment: there is no single completion to imitate")
