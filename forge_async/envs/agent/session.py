"""One agent episode's handoff between the endpoint (the agent's requests) and the runner
(the model's turns).

The agent's request becomes an `Asked` event holding the token ids it adds; the
environment hands those to the runner, which samples the model's turn; `answer` sends
that turn back to the waiting request. Only one request of a session is answered at a
time: a turn extends the conversation that the previous one ended.
"""

import asyncio
from dataclasses import dataclass

from forge_async.envs.agent.conversation import Conversation, HistoryEdited
from forge_async.envs.agent.replies import ToolCallReader, assistant_message, chat_completion
from forge_async.envs.environment import ModelTurn


@dataclass
class Asked:
    """The agent asked for a model turn: the token ids its request adds to the episode."""

    token_ids: list[int]


@dataclass
class Returned:
    """The agent function returned `value` (its reward)."""

    value: object


class SessionBusy(RuntimeError):
    """A request sent while another of the same session is being answered."""


class SessionEnded(RuntimeError):
    """A request sent to (or waiting in) an episode that has ended; says why it ended."""


class AgentSession:
    def __init__(self, conversation: Conversation, reader: ToolCallReader | None, model: str):
        self.conversation = conversation
        self.reader = reader
        self.model = model
        # Asked, Returned, HistoryEdited or the agent's exception, in the order they happened.
        self.events: asyncio.Queue = asyncio.Queue()
        self.tokens = 0  # in the episode so far: what the usage figures count
        self.ended: str | None = None
        self._reply: asyncio.Future | None = None
        self._request = None  # the ChatCompletionRequest being answered

    async def ask(self, request, messages: list[dict], tools: list | None) -> dict:
        """The chat.completion for `request` (its `messages`, `tools` as the agent sent them)."""
        if self.ended is not None:
            raise SessionEnded(self.ended)
        if self._reply is not None:
            raise SessionBusy("another request of this session is being answered; send one at a time")
        try:
            ids = self.conversation.request_ids(messages, tools)
        except HistoryEdited as err:
            self.events.put_nowait(err)
            raise
        self.tokens += len(ids)
        self._request, self._reply = request, asyncio.get_running_loop().create_future()
        self.events.put_nowait(Asked(ids))
        try:
            return await self._reply
        finally:
            self._request, self._reply = None, None

    def answer(self, turn: ModelTurn) -> None:
        """Send the model's `turn` to the request waiting for it; SessionEnded if the request is
        gone (its client gave up on it)."""
        if self._reply is None or self._reply.done():
            raise SessionEnded("the agent's request was gone before its turn came back")
        message, finish_reason = assistant_message(turn, self._request, self.reader)
        self.conversation.record_reply(message)
        reply = chat_completion(message, finish_reason, self.model, self.tokens, turn)
        self.tokens += len(turn.token_ids)
        self._reply.set_result(reply)

    def end(self, why: str) -> None:
        """No more requests: a waiting one is answered with SessionEnded(why)."""
        self.ended = why
        if self._reply is not None and not self._reply.done():
            self._reply.set_exception(SessionEnded(why))
