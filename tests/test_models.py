"""Checkpoint creation and loading: tokenizer, determinism, HF <-> TorchTitan, bad input."""

import json
from typing import Any

import pytest
import torch
import transformers

from forge_async.models.hf_checkpoint import Checkpoint, CheckpointError
from forge_async.errors import ConfigError
from forge_async.models.config import TinyModelConfig
from forge_async.models.shape import Llama3RopeScaling, ModelShape, UnsupportedModelError
from forge_async.models.tiny import create_tiny_checkpoint, write_tiny_config
from forge_async.models.titan import build_titan_model, state_dict_adapter
from forge_async.models.tokenizer import build_digit_tokenizer

pytestmark = pytest.mark.unit


def test_digit_tokenizer_round_trip_and_chat_template(tmp_path):
    tokenizer = build_digit_tokenizer()
    ids = tokenizer.encode("<bos>372<sep>", add_special_tokens=False)
    assert ids == [11, 3, 7, 2, 13]
    assert tokenizer.decode([3, 7, 12], skip_special_tokens=True) == "37"
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": "372"}], add_generation_prompt=True, tokenize=False
    )
    assert chat == "<bos>372<sep>"
    tokenizer.save_pretrained(str(tmp_path))
    reloaded = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert reloaded.encode("<bos>372<sep>", add_special_tokens=False) == ids


def test_tiny_checkpoint_is_deterministic_from_seed(tmp_path):
    a = Checkpoint.open(create_tiny_checkpoint(tmp_path / "a", TinyModelConfig(seed=3)))
    b = Checkpoint.open(create_tiny_checkpoint(tmp_path / "b", TinyModelConfig(seed=3)))
    c = Checkpoint.open(create_tiny_checkpoint(tmp_path / "c", TinyModelConfig(seed=4)))
    sa, sb, sc = a.load_hf_state_dict(), b.load_hf_state_dict(), c.load_hf_state_dict()
    assert sa.keys() == sb.keys() == sc.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["lm_head.weight"], sc["lm_head.weight"])


@pytest.mark.parametrize("checkpoint_fixture", ["tiny_checkpoint", "tiny_llama_checkpoint", "tiny_moe_checkpoint"])
def test_titan_model_matches_transformers(checkpoint_fixture, request):
    tiny_checkpoint = request.getfixturevalue(checkpoint_fixture)
    model = build_titan_model(tiny_checkpoint.shape)
    adapter = state_dict_adapter(tiny_checkpoint.shape)
    model.load_state_dict(adapter.from_hf(tiny_checkpoint.load_hf_state_dict()), strict=True)
    reference = transformers.AutoModelForCausalLM.from_pretrained(str(tiny_checkpoint.path), dtype=torch.float32)
    tokens = torch.tensor([[11, 3, 1, 4, 13, 4, 12], [11, 9, 9, 2, 13, 9, 12]])
    with torch.no_grad():
        diff = (model(tokens) - reference(tokens).logits).abs().max().item()
    assert diff < 1e-5
    # And back: TorchTitan -> HF names reproduces the checkpoint exactly.
    hf = adapter.to_hf(model.state_dict())
    original = tiny_checkpoint.load_hf_state_dict()
    assert hf.keys() == original.keys()
    assert all(torch.equal(hf[k], original[k]) for k in hf)


@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen3_moe"])
def test_tiny_config_reads_as_its_config_class_built_from_the_same_keys(family, tmp_path):
    """config.json holds only the keys the tiny model sets: read with transformers (as vLLM
    and AutoConfig read it), it is the model type's config class built from those keys."""
    hf_config = write_tiny_config(tmp_path, TinyModelConfig(family=family))
    read = transformers.AutoConfig.from_pretrained(str(tmp_path)).to_dict()
    built = transformers.AutoConfig.for_model(**hf_config).to_dict()
    del read["_name_or_path"], built["_name_or_path"]  # where it was read from
    assert read == built
    assert read["model_type"] == family and read["hidden_act"] == "silu"


def test_missing_checkpoint_path_names_it(tmp_path):
    missing = tmp_path / "no_such_model"
    with pytest.raises(CheckpointError, match="checkpoint directory not found") as err:
        Checkpoint.open(missing)
    assert str(missing) in str(err.value)


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(CheckpointError, match="no config.json"):
        Checkpoint.open(tmp_path)


def test_unsupported_architecture_names_it(tmp_path):
    path = create_tiny_checkpoint(tmp_path / "m")
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="'GPT2LMHeadModel' is not supported"):
        Checkpoint.open(path)


def test_bad_tiny_family_names_the_key_and_the_choices():
    with pytest.raises(ConfigError, match=r"^model.tiny.family='gpt2': one of qwen3, llama, qwen3_moe$"):
        TinyModelConfig(family="gpt2")


LLAMA_3_1_ROPE = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}


def llama_config(**keys: Any) -> dict[str, Any]:
    """A Llama 3.1 8B config.json (without its RoPE settings), plus `keys`."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": 128256,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        **keys,
    }


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_scaling": LLAMA_3_1_ROPE, "rope_theta": 500000.0},  # as written by transformers 4
        {"rope_parameters": {**LLAMA_3_1_ROPE, "rope_theta": 500000.0}},  # transformers 5
    ],
)
def test_llama3_rope_scaling_is_read_from_either_config_form(rope):
    shape = ModelShape.from_hf_config(llama_config(**rope), "llama")
    assert (shape.family, shape.rope_theta, shape.head_dim, shape.n_kv_heads) == ("llama", 500000.0, 128, 8)
    assert shape.rope_scaling == Llama3RopeScaling(8.0, 1.0, 4.0, 8192)


@pytest.mark.parametrize(
    "config, message",
    [
        (llama_config(rope_parameters={"rope_type": "yarn", "factor": 4.0}), "'yarn' is not supported for llama"),
        (llama_config(rope_parameters={"rope_type": "llama3", "factor": 8.0}), "without low_freq_factor"),
        (
            llama_config(architectures=["Qwen3ForCausalLM"], rope_scaling=LLAMA_3_1_ROPE),
            "'llama3' is not supported for qwen3",
        ),
        (llama_config(attention_bias=True), "attention_bias=true is not supported"),
    ],
)
def test_unsupported_model_settings_are_named(config, message):
    with pytest.raises(UnsupportedModelError, match=message):
        ModelShape.from_hf_config(config, "model")
