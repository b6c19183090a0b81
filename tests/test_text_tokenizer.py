"""The tiny model's byte tokenizer (model.tiny.tokenizer=bytes): any text, a chat template,
a checkpoint vLLM serves text from, and a GRPO run on text prompts."""

import asyncio
import json

import pytest
import transformers

from forge_async.cli.subprocess_run import run_app
from forge_async.generation.config import SamplingConfig
from forge_async.envs.templating import observation_ids
from forge_async.errors import ConfigError
from forge_async.handles import meshes
from forge_async.models.hf_checkpoint import Checkpoint
from forge_async.models.config import TinyModelConfig
from forge_async.models.tiny import create_tiny_checkpoint, write_tiny_config
from forge_async.models.tokenizer import build_byte_tokenizer, build_digit_tokenizer, load_tokenizer
from forge_async.tasks.config import TaskConfig
from forge_async.tasks.digits import DigitTask
from forge_async.tasks.task import TaskError, prompt_token_ids
from tests.support.meshes import spawn_generator

pytestmark = pytest.mark.unit

TEXTS = [
    "What is 4 + 3?",
    "café, naïve, Ωmega",
    "中文字符",
    "emoji 🙂👍🏽 and a family 👨‍👩‍👧",
    "  spaces  , tabs\t, newlines\n\nand . punctuation !",
    "",
]
SYSTEM_USER = [
    {"role": "system", "content": "Answer with a number."},
    {"role": "user", "content": "What is 4 + 3?"},
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_byte_tokenizer()


@pytest.mark.parametrize("text", TEXTS)
def test_any_text_round_trips_one_token_per_utf8_byte(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids == list(text.encode("utf-8"))  # token id = byte value
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode(ids + [tokenizer.eos_token_id], skip_special_tokens=True) == text


def test_vocabulary_is_the_bytes_then_the_special_tokens(tokenizer):
    assert len(tokenizer) == 263
    specials = ["<pad>", "<bos>", "<eos>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]
    assert tokenizer.convert_ids_to_tokens(list(range(256, 263))) == specials
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (256, 257, 258)
    # A special token in a text is one token; decoding without special tokens drops it.
    assert tokenizer.encode("<|user|>hi<eos>", add_special_tokens=False) == [260, 104, 105, 258]


def test_chat_template_renders_system_and_user_with_the_assistant_marker(tokenizer):
    text = tokenizer.apply_chat_template(SYSTEM_USER, add_generation_prompt=True, tokenize=False)
    assert text == "<bos><|system|>Answer with a number.<|user|>What is 4 + 3?<|assistant|>"
    ids = prompt_token_ids(tokenizer, SYSTEM_USER)
    assert ids == [257, 259, *b"Answer with a number.", 260, *b"What is 4 + 3?", 261]
    # A text prompt is one user message; without the generation prompt, no assistant marker.
    assert prompt_token_ids(tokenizer, "hi") == [257, 260, 104, 105, 261]
    plain = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert plain == "<bos><|user|>hi"
    # A finished assistant turn ends with EOS, as the model ends it.
    answered = tokenizer.apply_chat_template(SYSTEM_USER + [{"role": "assistant", "content": "7"}], tokenize=False)
    assert answered == text + "7<eos>"


def test_chat_template_names_an_unknown_role(tokenizer):
    with pytest.raises(
        Exception, match="unknown chat role bot; the byte tokenizer knows system, user, assistant, tool"
    ):
        tokenizer.apply_chat_template([{"role": "bot", "content": "x"}], tokenize=False)


def test_an_environment_reply_is_a_tool_turn(tokenizer):
    """Multi-turn episodes (envs/templating.py): a text observation after the model's turn."""
    assert observation_ids(tokenizer, "7") == [262, ord("7"), 261]  # <|tool|>7<|assistant|>


def test_saved_tokenizer_loads_with_autotokenizer_and_gives_the_same_ids(tokenizer, tmp_path):
    tokenizer.save_pretrained(str(tmp_path))
    reloaded = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for text in TEXTS:
        assert reloaded.encode(text, add_special_tokens=False) == tokenizer.encode(text, add_special_tokens=False)
        assert reloaded.decode(reloaded.encode(text, add_special_tokens=False)) == text
    assert prompt_token_ids(reloaded, SYSTEM_USER) == prompt_token_ids(tokenizer, SYSTEM_USER)
    assert (reloaded.pad_token_id, reloaded.bos_token_id, reloaded.eos_token_id) == (256, 257, 258)


@pytest.mark.parametrize("name", ["digits", "bytes"])
def test_a_tiny_checkpoints_tokenizer_loads_as_autotokenizer_loads_it(name, tmp_path):
    """load_tokenizer's way for the tiny model's tokenizers (without AutoTokenizer's imports)
    gives what AutoTokenizer gives: the class, the ids, the chat template, the special tokens."""
    write_tiny_config(tmp_path, TinyModelConfig(tokenizer=name))
    auto, tiny = transformers.AutoTokenizer.from_pretrained(str(tmp_path)), load_tokenizer(tmp_path, tiny=True)
    assert type(tiny) is type(auto) and len(tiny) == len(auto)
    texts = TEXTS if name == "bytes" else ["372", "<bos>01<sep>9", ""]
    for text in texts:
        assert tiny.encode(text) == auto.encode(text)
        assert tiny.decode(tiny.encode(text), skip_special_tokens=True) == auto.decode(
            auto.encode(text), skip_special_tokens=True
        )
    messages = SYSTEM_USER if name == "bytes" else [{"role": "user", "content": "372"}]
    assert prompt_token_ids(tiny, messages) == prompt_token_ids(auto, messages)
    assert tiny.all_special_ids == auto.all_special_ids and tiny.chat_template == auto.chat_template
    assert load_tokenizer(tmp_path, tiny=False).encode(texts[0]) == auto.encode(texts[0])


def test_config_key_picks_the_tokenizer_and_its_context():
    assert (TinyModelConfig().tokenizer, TinyModelConfig().max_seq_len) == ("digits", 64)
    assert TinyModelConfig(tokenizer="bytes").max_seq_len == 512
    assert TinyModelConfig(tokenizer="bytes", max_seq_len=300).max_seq_len == 300
    with pytest.raises(ConfigError, match=r"^model.tiny.tokenizer='chars': one of digits, bytes$"):
        TinyModelConfig(tokenizer="chars")


def test_prompts_too_long_for_the_context_are_named_at_load(tokenizer, tmp_path):
    room = 512 - 3  # the bytes context less the default sampling.max_tokens
    with pytest.raises(TaskError, match=r"^task.num_digits=600 makes 603-token prompts; the context leaves 509"):
        DigitTask("copy_digits", 600, tokenizer, room)
    task = DigitTask("max_digit", 3, tokenizer, room)  # the digit tasks run on bytes too
    prompt = task.hold_out(1)[0]
    assert prompt.token_ids == [257, 260, *prompt.text.encode(), 261]

    from forge_async.tasks.dataset import DatasetTask

    data = tmp_path / "prompts.jsonl"
    rows = [{"prompt": "Quelle est la capitale ?", "answer": "Paris"}, {"prompt": "é" * 253, "answer": "x"}]
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows))
    with pytest.raises(TaskError, match=r"prompts.jsonl: row 2: the prompt is 509 tokens"):
        DatasetTask(TaskConfig(name="dataset", dataset=str(data)), tokenizer, room - 1)
    assert len(DatasetTask(TaskConfig(name="dataset", dataset=str(data)), tokenizer, room).prompts) == 2


@pytest.fixture(scope="module")
def byte_checkpoint(tmp_path_factory) -> Checkpoint:
    model = tmp_path_factory.mktemp("tiny_bytes") / "model"
    return Checkpoint.open(create_tiny_checkpoint(model, TinyModelConfig(tokenizer="bytes")))


def test_tiny_checkpoint_takes_the_tokenizers_vocabulary(byte_checkpoint, tmp_path):
    config = json.loads((byte_checkpoint.path / "config.json").read_text())
    assert (config["vocab_size"], config["max_position_embeddings"]) == (263, 512)
    assert (config["pad_token_id"], config["bos_token_id"], config["eos_token_id"]) == (256, 257, 258)
    assert byte_checkpoint.shape.max_seq_len == 512
    digits = json.loads((create_tiny_checkpoint(tmp_path / "digits") / "config.json").read_text())
    assert (digits["vocab_size"], digits["max_position_embeddings"]) == (len(build_digit_tokenizer()), 64)


@pytest.mark.procs
def test_vllm_generates_text_from_a_text_prompt(byte_checkpoint, tokenizer):
    procs, generator = spawn_generator(byte_checkpoint)
    try:
        prompt = tokenizer.apply_chat_template(SYSTEM_USER, add_generation_prompt=True, tokenize=False)
        sampling = SamplingConfig(max_tokens=16, temperature=1.0)
        (group,) = generator.generate.call_one([prompt], sampling, 4).get()
    finally:
        asyncio.run(meshes.stop_all(procs))
    assert len(group) == 4
    for completion in group:
        assert completion.prompt_ids == prompt_token_ids(tokenizer, SYSTEM_USER)  # vLLM read the markers whole
        assert 1 <= len(completion.token_ids) <= 16
        assert all(0 <= t < 263 for t in completion.token_ids)
        assert completion.text == tokenizer.decode(completion.token_ids, skip_special_tokens=True)
    assert any(completion.text for completion in group)


@pytest.mark.e2e
def test_grpo_app_runs_on_text_prompts(tmp_path):
    data = tmp_path / "prompts.jsonl"
    rows = [{"prompt": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(6) for b in range(6)]
    rows += [{"prompt": "Combien font deux et deux ? Réponds en chiffres.", "answer": "4"}]
    rows += [{"prompt": "中 + 1 = ? 🙂", "answer": "?"}]
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows))
    run = run_app(
        tmp_path / "run",
        "model.tiny.tokenizer=bytes",
        "model.tiny.max_seq_len=512",
        "task.name=dataset",
        f"task.dataset={data}",
        "steps=3",
        "eval.prompts=4",  # held out of the 38 rows
        "checkpoint.every_steps=0",
        timeout=600,
    )
    assert run.returncode == 0, run.output
    assert [m["step"] for m in run.metrics] == [1, 2, 3]
    assert "dataset: kept 38 of 38 rows" in run.output
    initial = run.run_dir / "initial_model"
    assert json.loads((initial / "config.json").read_text())["vocab_size"] == 263
    saved = transformers.AutoTokenizer.from_pretrained(str(initial))
    assert saved.encode("é", add_special_tokens=False) == [0xC3, 0xA9]
