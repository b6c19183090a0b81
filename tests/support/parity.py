"""Logprob parity: the generator against the trainer, vLLM and the trainer against transformers."""

import json
import subprocess
import sys
from pathlib import Path

import torch
import transformers

from forge_async.data.episode import Episode
from forge_async.generation.config import SamplingConfig
from tests.support.digits import fixed_sequences

TOLERANCE = 1e-4

VLLM_SCORE = """
import json, sys
from forge_async.generation.config import GeneratorConfig
from forge_async.generation.platform import prepare_process
from vllm import LLM, SamplingParams
from vllm.lora.request import LoRARequest
if __name__ == "__main__":
    platform = prepare_process(GeneratorConfig())  # as a generator proc does
    adapter = sys.argv[2] if len(sys.argv) > 2 else None  # a PEFT adapter directory, served on the model
    lora = {"enable_lora": True, "max_lora_rank": 8} if adapter else {}
    llm = LLM(model=sys.argv[1], dtype="float32", kv_cache_memory_bytes=2**27, **platform.llm_kwargs(), **lora)
    out = llm.generate([{"prompt_token_ids": [11, 3, 1, 4, 13, 4, 12]}],
                       SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False,
                       lora_request=LoRARequest("adapter", 1, adapter) if adapter else None)[0]
    seq = [11, 3, 1, 4, 13, 4, 12]
    print("LOGPROBS", json.dumps([out.prompt_logprobs[t][seq[t]].logprob for t in range(1, len(seq))]))
"""


def max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


def sampled_parity(generator, trainer) -> float:
    """Max |generator logprob - trainer logprob| over freshly sampled tokens."""
    groups = generator.generate.call_one(
        [[11, 3, 1, 4, 13], [11, 9, 2, 6, 13]], SamplingConfig(max_tokens=6), n=4
    ).get()
    completions = [c for group in groups for c in group]
    scored = trainer.sequence_logprobs.call_one([c.prompt_ids + c.token_ids for c in completions]).get()
    return max_diff(
        [c.logprobs for c in completions],
        [s[len(c.prompt_ids) - 1 :] for c, s in zip(completions, scored)],
    )


def toy_episodes(generator) -> list[Episode]:
    groups = generator.generate.call_one([[11, 5, 2, 8, 13]], SamplingConfig(max_tokens=4), n=8).get()
    return [Episode(c, reward=float(i % 2), advantage=1.0 if i % 2 else -1.0) for i, c in enumerate(groups[0])]


def assert_parity_across_one_step(generator, trainer, tolerance: float = TOLERANCE) -> list[list[float]]:
    """The generator and the trainer agree at v0 and, after one step synced through the store,
    at v1 (which differs from v0). Returns the generator's v0 logprobs of `fixed_sequences()`."""
    sequences = fixed_sequences()
    # v0: the generator and the trainer agree on sampled tokens and on fixed sequences.
    assert generator.get_version.call_one().get() == 0
    assert sampled_parity(generator, trainer) < tolerance
    v0 = generator.score.call_one(sequences).get()
    assert max_diff(v0, trainer.sequence_logprobs.call_one(sequences).get()) < tolerance

    # One optimizer step -> v1 pushed -> generator loads v1: parity again, and v1 != v0.
    assert trainer.train_step.call_one(toy_episodes(generator)).get().version == 1
    assert trainer.push_weights.call_one().get().version == 1
    assert generator.load_version.call_one(1).get().version == 1
    assert generator.get_version.call_one().get() == 1
    v1 = generator.score.call_one(sequences).get()
    assert max_diff(v1, trainer.sequence_logprobs.call_one(sequences).get()) < tolerance
    assert sampled_parity(generator, trainer) < tolerance
    assert max_diff(v0, v1) > 1e-3
    return v0


def fp32_logprobs(checkpoint, sequences: list[list[int]]) -> list[list[float]]:
    """transformers' fp32 logprobs of each token after the first."""
    model = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint.path), dtype=torch.float32)
    scores = []
    with torch.no_grad():
        for seq in sequences:
            tokens = torch.tensor([seq])
            log_probs = torch.log_softmax(model(tokens).logits[0, :-1], dim=-1)
            scores.append(log_probs.gather(-1, tokens[0, 1:, None]).squeeze(-1).tolist())
    return scores


def assert_vllm_matches_transformers(model_dir: Path, model, adapter_dir: Path | None = None) -> None:
    """vLLM serving `model_dir` (+ the PEFT adapter in `adapter_dir`, rank <= 8) gives the
    logprobs transformers' `model` gives for a fixed sequence."""
    adapter = [str(adapter_dir)] if adapter_dir else []
    proc = subprocess.run(
        [sys.executable, "-c", VLLM_SCORE, str(model_dir), *adapter], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(out for out in proc.stdout.splitlines() if out.startswith("LOGPROBS"))
    vllm_logprobs = json.loads(line.split(" ", 1)[1])
    tokens = torch.tensor([[11, 3, 1, 4, 13, 4, 12]])
    with torch.no_grad():
        reference = torch.log_softmax(model(tokens).logits[0, :-1], dim=-1)
    expected = reference.gather(-1, tokens[0, 1:, None])[:, 0].tolist()
    assert max(abs(a - b) for a, b in zip(vllm_logprobs, expected)) < 1e-4
