"""Checkpoint creation and loading: tokenizer, determinism, HF <-> TorchTitan, bad input."""

import json

import pytest
import torch
import transformers

from forge_async.models.checkpoint import Checkpoint, CheckpointError
from forge_async.models.shape import UnsupportedModelError
from forge_async.models.config import TinyModelConfig
from forge_async.models.tiny import create_tiny_checkpoint
from forge_async.models.titan import build_titan_model, state_dict_adapter
from forge_async.models.tokenizer import build_digit_tokenizer


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


def test_titan_model_matches_transformers(tiny_checkpoint):
    model = build_titan_model(tiny_checkpoint.shape)
    adapter = state_dict_adapter(tiny_checkpoint.shape)
    model.load_state_dict(adapter.from_hf(tiny_checkpoint.load_hf_state_dict()), strict=True)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        str(tiny_checkpoint.path), dtype=torch.float32
    )
    tokens = torch.tensor([[11, 3, 1, 4, 13, 4, 12], [11, 9, 9, 2, 13, 9, 12]])
    with torch.no_grad():
        diff = (model(tokens) - reference(tokens).logits).abs().max().item()
    assert diff < 1e-5
    # And back: TorchTitan -> HF names reproduces the checkpoint exactly.
    hf = adapter.to_hf(model.state_dict())
    original = tiny_checkpoint.load_hf_state_dict()
    assert hf.keys() == original.keys()
    assert all(torch.equal(hf[k], original[k]) for k in hf)


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
