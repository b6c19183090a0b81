"""Observations as tokens: text goes through the tokenizer's chat template, one turn at a time.

A text observation is rendered as a `tool` message followed by the generation prompt
(the tokens that hand the turn back to the model). Only that suffix is encoded: the
tokens of the turns before it are the ones the model actually sampled, never re-rendered.
The suffix is what the template adds after a fixed user + assistant exchange, so it does
not depend on how a template renders earlier turns (some drop past reasoning).
"""

from forge_async.envs.environment import Observation

_EXCHANGE = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


class TemplateError(ValueError):
    """A chat template that cannot render one more message after a finished exchange."""


def observation_ids(tokenizer, observation: Observation, role: str = "tool") -> list[int]:
    """The token ids that put `observation` in the episode: ids as they are, text templated."""
    if not isinstance(observation, str):
        return list(observation)
    if not tokenizer.chat_template:
        return tokenizer.encode(observation, add_special_tokens=False)
    before = tokenizer.apply_chat_template(_EXCHANGE, tokenize=False)
    message = {"role": role, "content": observation}
    after = tokenizer.apply_chat_template(_EXCHANGE + [message], tokenize=False, add_generation_prompt=True)
    if not after.startswith(before):
        raise TemplateError(
            f"the tokenizer's chat template renders a conversation differently once a {role!r} message "
            "follows it; return token ids from the environment instead of text"
        )
    return tokenizer.encode(after[len(before) :], add_special_tokens=False)
