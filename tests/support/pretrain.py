"""A tiny model that has learned something already: the base a LoRA run starts from.

LoRA adapts linear layers only. In a random tiny model the frozen embeddings, norms and
lm_head keep the logits within about +-1.3, so adapters alone cannot make any answer
likely (docs/lora.md); real LoRA runs start from a trained model. This makes one in
seconds: every weight of the tiny checkpoint trained with a supervised next-token loss to
answer a digit task's prompt with one of its digits, picked at random, then EOS. It has
the answer format but not the rule: its samples within a group differ, so GRPO has
something to compare, and choosing the right digit is left to the adapters.
"""

import random
from pathlib import Path

import torch
from transformers import AutoTokenizer

from forge_async.tasks.config import TaskConfig
from forge_async.envs.registry import build_task
from forge_async.losses.grpo import token_logprobs
from forge_async.models.hf_checkpoint import Checkpoint, save_checkpoint
from forge_async.models.titan import build_titan_model, state_dict_adapter

ROWS = 128  # per step


def any_digit_answers(task, tokenizer, rng: random.Random) -> torch.Tensor:
    """ROWS rows of prompt tokens + one of the prompt's digits + EOS (all one length)."""
    rows = []
    for _ in range(ROWS):
        prompt = task.sample(rng)
        digit = tokenizer.convert_tokens_to_ids(rng.choice(prompt.text))
        rows.append(prompt.token_ids + [digit, tokenizer.eos_token_id])
    return torch.tensor(rows)


def pretrain(checkpoint: Checkpoint, directory: Path, steps: int = 150, lr: float = 3e-3) -> Checkpoint:
    """`checkpoint` trained to answer the default task's prompts with any of their digits."""
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.path))
    task = build_task(TaskConfig(), tokenizer, checkpoint.shape.max_seq_len)
    adapter = state_dict_adapter(checkpoint.shape)
    model = build_titan_model(checkpoint.shape)
    model.load_state_dict(adapter.from_hf(checkpoint.load_hf_state_dict()))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    rng = random.Random(0)
    prompt_length = len(task.sample(random.Random(0)).token_ids)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: more threads only contend (seconds vs minutes on 2 busy cores)
    try:
        for _ in range(steps):
            tokens = any_digit_answers(task, tokenizer, rng)
            loss = -token_logprobs(model(tokens), tokens)[:, prompt_length - 1 :].mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        torch.set_num_threads(threads)
    hf_state_dict = adapter.to_hf({name: t.detach() for name, t in model.state_dict().items()})
    return Checkpoint.open(save_checkpoint(directory, checkpoint.hf_config, hf_state_dict, checkpoint.path))
