"""TRL's synchronous `GRPOTrainer` on a forge_async task: the baseline of benchmarks.pipeline.vs_trl and long_tail.

    .venv/bin/python -m benchmarks.pipeline.trl_grpo CHECKPOINT [--num-digits 5] [--steps 400] [--seed 0]
    .venv/bin/python -m benchmarks.pipeline.trl_grpo CHECKPOINT --completion-tokens 128   # every completion 128 tokens
    .venv/bin/python -m benchmarks.pipeline.trl_grpo CHECKPOINT --max-tokens 256 --lr 1e-12   # up to 256, untrained
    .venv/bin/python -m benchmarks.pipeline.trl_grpo CHECKPOINT --config-name reasoning_gym --max-tokens 256

Needs TRL (`pip install -e ".[bench]"`); forge_async does not. One process, as a TRL user
runs it: plain Hugging Face `generate` on CPU, one optimizer step per batch. The same
checkpoint, batch (16 prompts x 8 completions), answer budget, sampling, learning rate,
Adam betas and gradient clip as the CPU default, and the task's own reward function.
`--config-name` takes the task of a preset in configs/ (its `task:` section, as forge_async
builds it; default: the CPU default's digits task with `--num-digits`), `--max-tokens` and
`--lr` the answer budget and learning rate, `--threads` torch's threads.
TRL's defaults for the rest (DAPO token-mean loss, rewards scaled by the group's std,
no KL penalty, so no reference model). Prints `step N reward R` after every step.
"""

import argparse
import random
import tempfile
from pathlib import Path
from types import SimpleNamespace

import datasets
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback

from forge_async.tasks.config import TaskConfig
from forge_async.envs.registry import build_task
from forge_async.tasks.task import Prompt, Task

try:
    from trl import GRPOConfig, GRPOTrainer
except ImportError as err:
    raise SystemExit(f"TRL is not installed ({err}): .venv/bin/pip install -e '.[bench]'") from err

PROMPTS_PER_STEP = 16
GROUP_SIZE = 8
ANSWER_TOKENS = 3  # the answer digit, EOS, one spare: the CPU default's sampling.max_tokens
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def preset_task(config_name: str, overrides: list[str]) -> TaskConfig:
    """The `task:` section of configs/CONFIG_NAME.yaml with `overrides` (task.* keys), as a run builds it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from forge_async.controller.config import GRPOConfig as RunConfig

    ConfigStore.instance().store(name="grpo_schema", node=RunConfig)  # what configs/grpo.yaml's defaults name
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        cfg = compose(config_name=config_name, overrides=overrides)
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TaskConfig), cfg.task))


def task_prompts(task: Task, tokenizer, count: int, seed: int) -> tuple[datasets.Dataset, list[Prompt]]:
    """`count` of the task's prompts drawn from `seed`: as TRL's dataset (text, special tokens
    included, and each prompt's index) and as the task's own Prompts (what its reward reads)."""
    rng = random.Random(seed)
    prompts = [task.sample(rng) for _ in range(count)]
    texts = [tokenizer.decode(p.token_ids) for p in prompts]
    return datasets.Dataset.from_dict({"prompt": texts, "index": list(range(count))}), prompts


def reward_function(task: Task, prompts: list[Prompt]):
    """The task's own reward, on what TRL hands a reward function."""

    def task_reward(completions, completion_ids, index, **_) -> list[float]:
        return [
            task.reward(prompts[i], SimpleNamespace(text=text, token_ids=ids))
            for text, ids, i in zip(completions, completion_ids, index)
        ]

    return task_reward


class PrintReward(TrainerCallback):
    """One console line per optimizer step (its mean reward and completion length), flushed, for the caller to timestamp."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "reward" in logs:
            tokens = logs["completions/mean_length"]
            print(f"step {state.global_step} reward {logs['reward']:.4f} mean_length {tokens:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint")
    parser.add_argument("--config-name", default="grpo", help="the preset in configs/ whose task is learned")
    parser.add_argument("--num-digits", type=int, default=None, help="task.num_digits (a digits task)")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--max-tokens", type=int, default=ANSWER_TOKENS, help="the answer budget")
    parser.add_argument("--threads", type=int, default=None, help="torch's threads (default: torch's, every core)")
    parser.add_argument(
        "--completion-tokens",
        type=int,
        default=None,
        help="every completion exactly this long (EOS held back until then); sets --max-tokens",
    )
    args = parser.parse_args()
    max_tokens = args.completion_tokens or args.max_tokens
    exact = {"min_new_tokens": args.completion_tokens} if args.completion_tokens else {}
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
    model = AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=torch.float32)
    overrides = [f"task.num_digits={args.num_digits}"] if args.num_digits is not None else []
    task = build_task(
        preset_task(args.config_name, overrides), tokenizer, model.config.max_position_embeddings - max_tokens
    )
    dataset, prompts = task_prompts(task, tokenizer, args.steps * PROMPTS_PER_STEP, args.seed)
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
            learning_rate=args.lr,
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
            reward_funcs=reward_function(task, prompts),
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[PrintReward()],
        )
        trainer.remove_callback(PrinterCallback)  # its dict per step; PrintReward's line is enough
        trainer.train()


if __name__ == "__main__":
    main()
