"""TRL's synchronous `GRPOTrainer` on a forge_async digit task: the baseline of benchmarks.vs_trl.

    .venv/bin/python -m benchmarks.trl_grpo CHECKPOINT [--num-digits 5] [--steps 400] [--seed 0]

Needs TRL (`pip install -e ".[bench]"`); forge_async does not. One process, as a TRL user
runs it: plain Hugging Face `generate` on CPU, one optimizer step per batch. The same
checkpoint, batch (16 prompts x 8 completions), answer budget, sampling, learning rate,
Adam betas and gradient clip as the CPU default, and the task's own reward function.
TRL's defaults for the rest (DAPO token-mean loss, rewards scaled by the group's std,
no KL penalty, so no reference model). Prints `step N reward R` after every step.
"""

import argparse
import random
import tempfile
from types import SimpleNamespace

import datasets
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from forge_async.data.tasks import DIGIT_RULES, single_digit_reward
from forge_async.models.tokenizer import BOS, SEP

PROMPTS_PER_STEP = 16
GROUP_SIZE = 8


def digit_prompts(num_digits: int, count: int, seed: int, rule: str) -> datasets.Dataset:
    """`count` prompts "<bos>d1..dn<sep>" and their answers, drawn from `seed`."""
    rng = random.Random(seed)
    rows = {"prompt": [], "answer": []}
    for _ in range(count):
        digits = [rng.randrange(10) for _ in range(num_digits)]
        rows["prompt"].append(BOS + "".join(map(str, digits)) + SEP)
        rows["answer"].append(str(DIGIT_RULES[rule](digits)))
    return datasets.Dataset.from_dict(rows)


def reward_function(eos_id: int):
    def digit_reward(completions, completion_ids, answer, **_) -> list[float]:
        return [
            single_digit_reward(a, SimpleNamespace(text=text, token_ids=ids), eos_id)
            for text, ids, a in zip(completions, completion_ids, answer)
        ]

    return digit_reward


class PrintReward(TrainerCallback):
    """One console line per optimizer step, flushed, for the caller to timestamp."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            print(f"step {state.global_step} reward {logs['reward']:.4f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("--num-digits", type=int, default=5)
    parser.add_argument("--rule", default="max_digit", choices=sorted(DIGIT_RULES))
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32)
    prompts = digit_prompts(args.num_digits, args.steps * PROMPTS_PER_STEP, args.seed, args.rule)
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            max_steps=args.steps,
            per_device_train_batch_size=PROMPTS_PER_STEP * GROUP_SIZE,
            num_generations=GROUP_SIZE,
            max_completion_length=3,
            temperature=1.0,
            top_p=1.0,
            learning_rate=1e-3,
            adam_beta1=0.9,
            adam_beta2=0.99,
            max_grad_norm=1.0,
            lr_scheduler_type="constant",
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            use_cpu=True,
            seed=args.seed,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward_function(tokenizer.eos_token_id),
            args=config,
            train_dataset=prompts,
            processing_class=tokenizer,
            callbacks=[PrintReward()],
        )
        trainer.remove_callback(PrinterCallback)  # its dict per step; PrintReward's line is enough
        trainer.train()


if __name__ == "__main__":
    main()
