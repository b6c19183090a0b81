"""TRL's synchronous `GRPOTrainer` on a forge_async digit task: the baseline of benchmarks.pipeline.vs_trl.

    .venv/bin/python -m benchmarks.pipeline.trl_grpo CHECKPOINT [--num-digits 5] [--steps 400] [--seed 0]
    .venv/bin/python -m benchmarks.pipeline.trl_grpo CHECKPOINT --completion-tokens 128   # every completion 128 tokens

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

from forge_async.tasks.digits import DigitTask
from forge_async.tasks.task import Prompt

try:
    from trl import GRPOConfig, GRPOTrainer
except ImportError as err:
    raise SystemExit(f"TRL is not installed ({err}): .venv/bin/pip install -e '.[bench]'") from err

PROMPTS_PER_STEP = 16
GROUP_SIZE = 8
ANSWER_TOKENS = 3  # the answer digit, EOS, one spare: the CPU default's sampling.max_tokens


def digit_prompts(task: DigitTask, tokenizer, count: int, seed: int) -> datasets.Dataset:
    """`count` of the task's prompts (as text, special tokens included) and their answers,
    drawn from `seed`."""
    rng = random.Random(seed)
    prompts = [task.sample(rng) for _ in range(count)]
    return datasets.Dataset.from_dict(
        {"prompt": [tokenizer.decode(p.token_ids) for p in prompts], "answer": [p.answer for p in prompts]}
    )


def reward_function(task: DigitTask):
    """The task's own reward, on what TRL hands a reward function."""

    def digit_reward(completions, completion_ids, answer, **_) -> list[float]:
        return [
            task.reward(Prompt(token_ids=[], answer=a), SimpleNamespace(text=text, token_ids=ids))
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
    parser.add_argument("--rule", default="max_digit", choices=["max_digit", "first_digit"])  # 1-digit answers
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--completion-tokens",
        type=int,
        default=None,
        help="every completion exactly this long (EOS held back until then); default: the answer's 3",
    )
    args = parser.parse_args()
    max_tokens = args.completion_tokens or ANSWER_TOKENS
    exact = {"min_new_tokens": args.completion_tokens} if args.completion_tokens else {}
    torch.manual_seed(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32)
    task = DigitTask(args.rule, args.num_digits, tokenizer, model.config.max_position_embeddings - max_tokens)
    prompts = digit_prompts(task, tokenizer, args.steps * PROMPTS_PER_STEP, args.seed)
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            max_steps=args.steps,
            per_device_train_batch_size=PROMPTS_PER_STEP * GROUP_SIZE,
            num_generations=GROUP_SIZE,
            max_completion_length=max_tokens,
            generation_kwargs=exact,
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
            reward_funcs=reward_function(task),
            args=config,
            train_dataset=prompts,
            processing_class=tokenizer,
            callbacks=[PrintReward()],
        )
        trainer.remove_callback(PrinterCallback)  # its dict per step; PrintReward's line is enough
        trainer.train()


if __name__ == "__main__":
    main()
