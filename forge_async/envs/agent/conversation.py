"""A session's messages, turned into the tokens each request adds to the episode.

Token in, token out: the model's own turns keep the ids it sampled. A request's messages
must be the session's messages so far (each assistant message as the endpoint returned
it) followed by new ones; only the text the chat template adds for the new messages
(and the generation prompt) is encoded:

    suffix = render(messages, generation prompt) minus render(messages so far)

Anything else is a HistoryEdited: an agent that changed an earlier message or the tools,
or a template whose rendering of the earlier messages changes once more follow (not
append-only). Re-encoding the history would put tokens in the episode that the model
did not sample, so such an episode is dropped instead (counted by reason).
"""

import json

from forge_async.tasks.task import known_tokens


class HistoryEdited(ValueError):
    """A request whose messages do not extend the session's conversation; `reason` counts it."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class UnreadableRequest(ValueError):
    """A request the tokenizer or its chat template cannot render (answered 400)."""


class Conversation:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.messages: list[dict] | None = None  # as compared: normalised, None before the first request
        self.tools: list | None = None

    def request_ids(self, messages: list[dict], tools: list | None) -> list[int]:
        """The token ids `messages` add: all of them rendered for the first request, the suffix
        after the conversation so far for later ones. Records `messages` as the conversation."""
        if self.messages is None:
            ids = self._encode(self._render(messages, tools, generation_prompt=True))
        else:
            ids = self._encode(self._suffix(self.messages, messages, tools))
        self.messages, self.tools = [_comparable(m) for m in messages], tools
        return ids

    def record_reply(self, message: dict) -> None:
        """The assistant message the endpoint returned: the next request must repeat it."""
        if self.messages is None:
            raise RuntimeError("a reply recorded before the session's first request")
        self.messages.append(_comparable(message))

    def _suffix(self, so_far: list[dict], messages: list[dict], tools: list | None) -> str:
        """The text `messages` add to the conversation `so_far` (as compared: normalised)."""
        known = len(so_far)
        if tools != self.tools:
            raise HistoryEdited("agent_history_edit", "the request's tools differ from the session's earlier ones")
        if len(messages) <= known:
            raise HistoryEdited(
                "agent_history_edit", f"the request has {len(messages)} messages; the session already has {known}"
            )
        edited = next((i for i in range(known) if _comparable(messages[i]) != so_far[i]), None)
        if edited is not None:
            raise HistoryEdited(
                "agent_history_edit", f"message {edited} ({messages[edited].get('role')}) differs from the session's"
            )
        before = self._render(messages[:known], tools, generation_prompt=False)
        after = self._render(messages, tools, generation_prompt=True)
        if not after.startswith(before):
            raise HistoryEdited(
                "agent_template_not_append_only",
                "the chat template renders the earlier messages differently once new ones follow",
            )
        return after[len(before) :]

    def _render(self, messages: list[dict], tools: list | None, generation_prompt: bool) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=generation_prompt, tokenize=False
            )
        except Exception as err:  # jinja raises whatever the template raises
            raise UnreadableRequest(f"the chat template cannot render the messages: {err}") from err

    def _encode(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return known_tokens(self.tokenizer, ids, text, what="request", error=UnreadableRequest)


def _comparable(message: dict) -> dict:
    """What must match between the session's record and a request: role, text, tool calls (their
    arguments as parsed JSON: an agent may re-serialise them) and tool-call ids."""
    return {
        "role": message.get("role"),
        "content": _text(message.get("content")),
        "tool_calls": [_call(c) for c in message.get("tool_calls") or []],
        "tool_call_id": message.get("tool_call_id"),
    }


def _text(content) -> str:
    """A message's content as text: a string, or the text parts of a list of parts."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def _call(call: dict) -> tuple:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    try:
        arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        pass
    return call.get("id"), function.get("name"), json.dumps(arguments, sort_keys=True)
