"""A character-level tokenizer over digits, saved in Hugging Face format.

The built-in tasks speak a 14-token language: the digits 0-9 plus four special
tokens. Each character of a text is one token, so "<bos>372<sep>" encodes to
[BOS, 3, 7, 2, SEP]. The files it writes (tokenizer.json, tokenizer_config.json,
special_tokens_map.json) load with `AutoTokenizer.from_pretrained`, which is how
vLLM, transformers and this library all read tokenizers.
"""

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

DIGITS = [str(d) for d in range(10)]
PAD, BOS, EOS, SEP = "<pad>", "<bos>", "<eos>", "<sep>"
VOCAB = DIGITS + [PAD, BOS, EOS, SEP]

# Joins message contents and, when asked for a generation prompt, appends SEP:
# the chat form of a digit prompt is "<bos>" + digits + "<sep>".
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<sep>{% endif %}"
)


def build_digit_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {token: i for i, token in enumerate(VOCAB)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    # Special tokens are matched whole before splitting; everything else splits per character.
    core.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=PAD,
        additional_special_tokens=[SEP],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def save_digit_tokenizer(directory: Path) -> None:
    build_digit_tokenizer().save_pretrained(str(directory))
