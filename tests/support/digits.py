"""The tiny model's digit vocabulary as the tests use it: its tokenizer, special ids, fixed sequences."""

from forge_async.models.tokenizer import build_digit_tokenizer

TOKENIZER = build_digit_tokenizer()
EOS_ID = TOKENIZER.eos_token_id
PAD_ID = TOKENIZER.pad_token_id
ROOM = 61  # prompt tokens the tiny model's 64-token context leaves after max_tokens=3


def fixed_sequences() -> list[list[int]]:
    """Digit-task token sequences (BOS digits SEP answer EOS) used to compare models."""
    return [
        [11, 3, 1, 4, 13, 4, 12],
        [11, 9, 2, 6, 13, 9, 12],
        [11, 0, 5, 5, 13, 5],
        [11, 7, 7, 1, 13, 2, 3, 4],
    ]
