"""The tiny model's tokenizers, saved in Hugging Face format: digits (the default) or bytes.

Both write tokenizer.json, tokenizer_config.json and chat_template.jinja (transformers 5),
which load with `AutoTokenizer.from_pretrained`: how vLLM, transformers and this library
all read tokenizers. `model.tiny.tokenizer` picks one (models/config.py).

digits: the built-in tasks speak a 14-token language: the digits 0-9 plus four special
tokens. Each character of a text is one token, so "<bos>372<sep>" encodes to
[BOS, 3, 7, 2, SEP]. A text with any other character cannot be encoded.

bytes: any text, as its UTF-8 bytes, one token per byte (GPT-2's byte-level scheme: a BPE
model without merges over the 256 byte symbols), so token id b is byte b; then the special
tokens <pad>, <bos>, <eos> and one marker per chat role (263 tokens). "What is 4 + 3?" is
14 tokens; "é" 2, "中" 3, an emoji 4. Its chat template renders

    <bos><|system|>SYSTEM<|user|>QUESTION<|assistant|>

for a system and a user message with the generation prompt: a role marker before each
message, nothing after it but EOS after an assistant's (the model ends its turn with EOS).
"""

from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

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
    return _hf_tokenizer(core, CHAT_TEMPLATE, unk_token=PAD, additional_special_tokens=[SEP])


def _hf_tokenizer(core: Tokenizer, chat_template: str, **specials) -> PreTrainedTokenizerFast:
    """`core` as a transformers tokenizer with <bos>, <eos>, <pad>, `specials` and `chat_template`."""
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, **specials)
    tokenizer.chat_template = chat_template
    return tokenizer


def save_digit_tokenizer(directory: Path) -> None:
    build_digit_tokenizer().save_pretrained(str(directory))


# The byte tokenizer's chat roles, each with its marker token: <|system|>, <|user|>, ...
# ("tool": an environment's reply in a multi-turn episode, envs/templating.py).
CHAT_ROLES = ("system", "user", "assistant", "tool")
ROLE_MARKERS = [f"<|{role}|>" for role in CHAT_ROLES]
BYTE_SPECIALS = [PAD, BOS, EOS, *ROLE_MARKERS]  # ids 256, 257, ...

BYTE_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['" + "', '".join(CHAT_ROLES) + "'] %}"
    "{{ raise_exception('unknown chat role ' ~ message['role'] ~ '; the byte tokenizer knows "
    + ", ".join(CHAT_ROLES)
    + "') }}"
    "{% endif %}"
    "{{ '<|' ~ message['role'] ~ '|>' ~ (message['content'] or '') }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _byte_symbols() -> list[str]:
    """GPT-2's printable stand-in for each byte 0..255 (what the ByteLevel pre-tokenizer emits):
    printable Latin-1 bytes stand for themselves, the others for chr(256 + n) in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + shifted)
            shifted += 1
    return [symbols[byte] for byte in range(256)]


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """Any text as its UTF-8 bytes (token id = byte value), plus BYTE_SPECIALS; chat template included."""
    vocab = {symbol: byte for byte, symbol in enumerate(_byte_symbols())}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    # No regex split: with no merges, words need no boundaries; bytes map to their symbols.
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    # Special tokens are matched whole in any text before the byte split, in this order: 256, 257, ...
    core.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in BYTE_SPECIALS])
    # clean_up_tokenization_spaces off: decode gives back the text exactly ("a ." stays "a .")
    return _hf_tokenizer(
        core, BYTE_CHAT_TEMPLATE, additional_special_tokens=ROLE_MARKERS, clean_up_tokenization_spaces=False
    )


# model.tiny.tokenizer -> its builder (the names: models/config.py TINY_TOKENIZERS).
TINY_TOKENIZER_BUILDERS = {"digits": build_digit_tokenizer, "bytes": build_byte_tokenizer}


def build_tiny_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """The tiny model's tokenizer named by model.tiny.tokenizer ("digits" or "bytes")."""
    return TINY_TOKENIZER_BUILDERS[name]()


def load_tokenizer(path: str | Path, tiny: bool) -> PreTrainedTokenizerBase:
    """The tokenizer saved with the checkpoint at `path`, as `AutoTokenizer.from_pretrained` loads it.

    A tiny model's (`tiny`: written by models/tiny.py) is loaded by the class its
    tokenizer_config.json names, TokenizersBackend, the class AutoTokenizer resolves it to:
    importing AutoTokenizer brings in transformers' model classes, FSDP and DTensor, ~0.6
    CPU-s that the controller takes from the procs' start-up on a small box
    (benchmarks/pipeline/startup.py)."""
    if tiny:
        from transformers import TokenizersBackend

        return TokenizersBackend.from_pretrained(str(path))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))
