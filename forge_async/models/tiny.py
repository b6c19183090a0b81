"""Create a tiny Qwen3, Qwen3-MoE or Llama checkpoint locally, deterministically from a seed.

No model hub: the weights come from TorchTitan's own initialisation (seeded),
converted to Hugging Face names with TorchTitan's state-dict adapter, and saved
beside a config.json and the tokenizer `model.tiny.tokenizer` names (digits or bytes,
models/tokenizer.py; the vocabulary is the tokenizer's). vLLM, transformers and the
trainer all load the result like any downloaded checkpoint.

It is written in two parts: `write_tiny_config` (config.json and tokenizer: transformers'
tokenizer classes) and `write_tiny_weights` (TorchTitan). The app's controller writes the
first and a trainer proc, which has TorchTitan loaded already, the second (handles/meshes.py);
each half imports its library itself, so neither process pays the CPU of loading the other's.
config.json holds the keys the tiny model sets, not the whole of transformers' config class:
whoever reads it with transformers (vLLM, AutoConfig) gets the model type's defaults for the
rest, and the controller does not import the config classes (~0.9 CPU-s at start-up,
benchmarks/pipeline/startup.py).
"""

from pathlib import Path

from forge_async.models.hf_checkpoint import save_config, save_weights
from forge_async.models.config import TinyModelConfig
from forge_async.models.shape import ModelShape

_ROPE_THETA = 10000.0
# The HF model type and architecture of each family's tiny model.
_HF_TYPES = {
    "qwen3": ("qwen3", "Qwen3ForCausalLM"),
    "llama": ("llama", "LlamaForCausalLM"),
    "qwen3_moe": ("qwen3_moe", "Qwen3MoeForCausalLM"),
}


def _rope_parameters(cfg: TinyModelConfig) -> dict:
    """Qwen3: plain RoPE. Llama: Llama 3.1's scaling, shrunk to the tiny context so that
    it changes some frequencies (its one knob the tiny model can show)."""
    if cfg.family != "llama":
        return {"rope_type": "default", "rope_theta": _ROPE_THETA}
    return {
        "rope_type": "llama3",
        "rope_theta": _ROPE_THETA,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": max(1, cfg.context // 2),
    }


def _moe_keys(cfg: TinyModelConfig) -> dict:
    """Qwen3-MoE's keys: every layer sparse, top-k weights renormalised (as Qwen3-30B-A3B)."""
    if cfg.family != "qwen3_moe":
        return {}
    return {
        "num_experts": cfg.num_experts,
        "num_experts_per_tok": cfg.top_k,
        "moe_intermediate_size": cfg.moe_ffn_dim,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }


def _hf_config(cfg: TinyModelConfig, vocab_size: int, tokenizer) -> dict:
    """config.json: the model type and the keys the tiny model sets (the module's docstring)."""
    model_type, architecture = _HF_TYPES[cfg.family]
    return {
        "model_type": model_type,
        "architectures": [architecture],
        "vocab_size": vocab_size,
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn_dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_heads,
        "head_dim": cfg.head_dim,
        "max_position_embeddings": cfg.context,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "rope_parameters": _rope_parameters(cfg),
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "dtype": "float32",
        **_moe_keys(cfg),
    }


def write_tiny_config(directory: str | Path, cfg: TinyModelConfig) -> dict:
    """config.json and the tokenizer (cfg.tokenizer) of the tiny model into `directory`; returns the config."""
    from forge_async.models.tokenizer import build_tiny_tokenizer

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer(cfg.tokenizer)
    hf_config = _hf_config(cfg, len(tokenizer), tokenizer)
    save_config(directory, hf_config)
    tokenizer.save_pretrained(str(directory))
    return hf_config


def write_tiny_weights(directory: str | Path, hf_config: dict, seed: int) -> Path:
    """The weights of the model `hf_config` describes, initialised from `seed`, into `directory`."""
    from forge_async.models.titan import build_titan_model, state_dict_adapter  # TorchTitan: here only

    shape = ModelShape.from_hf_config(hf_config, "tiny model")
    model = build_titan_model(shape, seed=seed)
    return save_weights(directory, state_dict_adapter(shape).to_hf(model.state_dict()))


def create_tiny_checkpoint(directory: str | Path, cfg: TinyModelConfig | None = None) -> Path:
    """Write a tiny random-init checkpoint of `cfg.family` with `cfg.tokenizer`'s tokenizer into `directory`."""
    cfg = cfg or TinyModelConfig()
    write_tiny_weights(directory, write_tiny_config(directory, cfg), cfg.seed)
    return Path(directory)
