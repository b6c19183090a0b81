"""A model turn as the OpenAI chat.completion an agent gets back.

With env.agent.tool_parser set and tools offered in the request (tool_choice not "none"),
the turn's text goes through that vLLM tool parser: tool calls come back in the OpenAI
format (finish_reason "tool_calls"), the rest as content. Otherwise the text is the content.
"""

import time
import uuid

from forge_async.envs.environment import ModelTurn


class ToolCallReader:
    """env.agent.tool_parser's vLLM parser for this tokenizer (made once; its parsing is stateless)."""

    def __init__(self, name: str, tokenizer):
        from vllm.tool_parsers import ToolParserManager  # vLLM's OpenAI layer: only when asked for

        self.parser = ToolParserManager.get_tool_parser(name)(tokenizer)

    def tool_calls(self, text: str, request) -> tuple[str | None, list[dict]]:
        """(content, tool calls) in `text`, for `request` (vLLM's ChatCompletionRequest)."""
        found = self.parser.extract_tool_calls(text, request)
        if not found.tools_called:
            return text, []
        return found.content or None, [call.model_dump() for call in found.tool_calls]


def assistant_message(turn: ModelTurn, request, reader: ToolCallReader | None) -> tuple[dict, str]:
    """The assistant message for `turn` and its finish_reason."""
    offers_tools = request.tools and request.tool_choice != "none"
    content, calls = reader.tool_calls(turn.text, request) if reader and offers_tools else (turn.text, [])
    if calls:
        return {"role": "assistant", "content": content, "tool_calls": calls}, "tool_calls"
    return {"role": "assistant", "content": content}, turn.finish_reason


def chat_completion(message: dict, finish_reason: str, model: str, prompt_tokens: int, turn: ModelTurn) -> dict:
    """The response body: one choice, usage counted in the episode's tokens."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(turn.token_ids),
            "total_tokens": prompt_tokens + len(turn.token_ids),
        },
    }
