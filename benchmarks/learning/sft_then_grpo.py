"""Does GRPO after SFT beat more SFT, given the same wall time? A reasoning-gym task, the tiny model.

    .venv/bin/python -m benchmarks.learning.sft_then_grpo                          # seeds 0 1 2, ~3 min a seed
    .venv/bin/python -m benchmarks.learning.sft_then_grpo --seeds 0 --sft-steps 300 --grpo-steps 100 -- \\
        'task.reasoning_gym.datasets=[{name: leg_counting, config: {min_animals: 1, max_animals: 1, max_instances: 3}}]'
    .venv/bin/python -m benchmarks.learning.sft_then_grpo --demos 32 --sft-steps 150 --grpo-steps 900 --grpo-lr 1e-3 \\
        --grpo-temperature 1.0 --eval-prompts 40 -- grpo:trainer.warmup_steps=50 grpo:trainer.lr_schedule=constant \\
        'task.reasoning_gym.datasets=[{name: spell_backward, config: {min_word_len: 3, max_word_len: 3}}]'
        # scarce demonstrations, a task one rule answers: where GRPO's gain reaches +0.3 (docs/benchmarks.md)

Per seed s (the tiny model's seed and the runs' seed, `model.tiny.seed=s seed=s`), four held-out
evaluations on the same prompts (the same task config, `eval.prompts`, `task.reasoning_gym.eval_seed`),
greedy, scored with the dataset's own reward:

1. base: the initial model (the SFT run's version-0 evaluation);
2. SFT: `python -m apps.sft --config-name sft_reasoning_gym steps=N`, its last evaluation;
3. SFT+GRPO: `python -m apps.grpo --config-name reasoning_gym model.path=SFT_RUN/final_model steps=M
   trainer.lr=1e-4 sampling.temperature=0.7` (--grpo-lr, --grpo-temperature), its last evaluation;
   its training time is the `time/wall_s` of its last step (the clock starts when the meshes are
   up: process start-up, the final save and the report are not in it);
4. SFT alone at equal time: `apps.sft steps=N+k` from scratch with the same seed (its LR schedule
   spans the N+k steps: the budget given to SFT alone, scheduled as SFT would be), where
   k = GRPO's training time / the SFT run's seconds per step (its last step's `time/wall_s` / N).

Then GRPO's gain over SFT alone (3 - 4) per seed and the means; the mean length of the held-out
prompts in tokens (the task and tokenizer of the SFT run, rebuilt in-process); and how fast
reasoning-gym makes entries (`task.train[i]` over --entries entries, in-process) against the
GRPO runs' samples/s (summary.json).

The defaults (chain_sum of two one-digit terms, the presets' task; N=450, M=100) are where GRPO
had its best showing of the setups tried (docs/benchmarks.md): SFT to a policy that answers most
held-out prompts, then GRPO at a fine-tuning learning rate (the preset's 1e-3, a from-scratch
rate, with a fresh Adam state, took the fine-tuned policy from 0.75 to 0.05 in 25 steps) and at
temperature 0.7 (closer to the greedy answers evaluated).

Overrides after `--` go to every run (keep task.*, eval.*, model.tiny.* and sampling.max_tokens
there, so that the four evaluations see the same prompts and budget); one prefixed `sft:` goes to
the SFT runs only, `grpo:` to the GRPO runs only (`grpo:sampling.temperature=0.7`).

Scarce demonstrations (--demos K): the SFT runs (2 and 4) train on a fixed file of K
demonstrations instead of the whole training split: `task.name=dataset` on a jsonl of the first K
distinct questions of the GRPO run's training split (its `task.reasoning_gym` mix and `seed`, none
of them held out), each prompt the chat messages the reasoning_gym task renders (system prompt,
question) and each answer the gold answer in the answer tag. Their held-out prompts are
`eval.dataset`, a jsonl of the reasoning_gym task's held-out split (the same `eval.prompts`
entries of `eval_seed`, each answer the whole entry as JSON), scored by `reasoning_gym_reward`
(the answer tag's last block, then the entry's own dataset's `score_answer`, as the reasoning_gym
task scores it), so that the four evaluations still see the same prompts and reward (the GRPO
run's v0 evaluation is checked against the SFT run's last). GRPO (3) still draws every training question.

With --json, the table, GRPO's mean gain and the evaluations' means in the report's shape
(benchmarks/harness/results.py).
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from forge_async.cli.subprocess_run import AppRun, run_app
from benchmarks.harness.results import BenchmarkResult, Line, Series, Table, add_json_argument, this_command

EVAL_EVERY = 25


def reasoning_gym_reward(answer: str, completion_text: str) -> float:
    """task.reward_fn for --demos' held-out file, whose answer column is the whole reasoning-gym entry
    as JSON: what the reasoning_gym task gives the completion (the text of its last <answer> block,
    scored by the entry's own dataset's `score_answer`)."""
    import json

    from reasoning_gym import get_score_answer_fn
    from reasoning_gym.utils import extract_answer

    entry = json.loads(answer)
    score_answer = get_score_answer_fn(entry["metadata"]["source_dataset"])
    return float(score_answer(extract_answer(completion_text, tag_name="answer"), entry))


def write_demos(args: argparse.Namespace, grpo_overrides: list[str], workdir: Path) -> list[str]:
    """The K-demonstration and held-out jsonl files of --demos, and the SFT overrides that use them."""
    import json

    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from forge_async.controller.config import GRPOConfig
    from forge_async.tasks.config import ReasoningGymConfig
    from forge_async.tasks.reasoning_gym import create_mix

    ConfigStore.instance().store(name="grpo_schema", node=GRPOConfig)  # what configs/grpo.yaml's defaults name
    with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[2] / "configs"), version_base=None):
        cfg = compose(config_name=args.grpo_config, overrides=[o for o in grpo_overrides if o.startswith("task.")])
    rg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ReasoningGymConfig), cfg.task.reasoning_gym))
    if rg.answer_tag != "answer":
        raise SystemExit("--demos: reasoning_gym_reward reads the <answer> tag; keep task.reasoning_gym.answer_tag")

    def row(entry: dict) -> dict:
        messages = [{"role": "user", "content": entry["question"]}]
        if rg.system_prompt:
            messages.insert(0, {"role": "system", "content": rg.system_prompt})
        return {"prompt": messages, "answer": entry["answer"]}

    held_mix = create_mix(rg, rg.eval_seed, args.eval_prompts)
    held = [held_mix[i] for i in range(args.eval_prompts)]
    held_questions = {e["question"] for e in held}
    train = create_mix(rg, rg.seed, rg.size)
    demos, seen = [], set()
    for i in range(len(train)):
        entry = train[i]
        if entry["question"] in held_questions or entry["question"] in seen:
            continue
        seen.add(entry["question"])
        demos.append({**row(entry), "answer": f"<answer>{entry['answer']}</answer>"})
        if len(demos) == args.demos:
            break
    workdir.mkdir(parents=True, exist_ok=True)
    demos_file, held_file = workdir / f"demos_{args.demos}.jsonl", workdir / "held_out.jsonl"
    demos_file.write_text("".join(json.dumps(d) + "\n" for d in demos))
    held_file.write_text("".join(json.dumps({**row(e), "answer": json.dumps(e)}) + "\n" for e in held))
    print(
        f"--demos: {len(demos)} demonstrations -> {demos_file}; {len(held)} held-out prompts -> {held_file}", flush=True
    )
    return [
        "task.name=dataset",
        f"task.dataset={demos_file}",
        f"eval.dataset={held_file}",
        "task.reward_fn=benchmarks.learning.sft_then_grpo:reasoning_gym_reward",
    ]


def run_or_fail(run_dir: Path, app: str, overrides: list[str]) -> AppRun:
    run = run_app(run_dir, *overrides, app=app, timeout=900)
    if run.returncode != 0:
        raise SystemExit(f"{app} {' '.join(overrides)} failed ({run.returncode}):\n{run.output[-3000:]}")
    return run


def training_s(run: AppRun) -> float:
    """Seconds from the start of training to the end of its last step (metrics.jsonl)."""
    return run.metrics[-1]["time/wall_s"]


def one_seed(seed: int, args: argparse.Namespace, overrides: dict[str, list[str]], workdir: Path) -> dict:
    common = [
        f"seed={seed}",
        f"model.tiny.seed={seed}",
        f"eval.prompts={args.eval_prompts}",
        f"eval.every_steps={EVAL_EVERY}",
    ]
    sft_args = [f"--config-name={args.sft_config}", *common, *overrides["sft"]]
    sft = run_or_fail(workdir / f"sft_{seed}", "apps.sft", [*sft_args, f"steps={args.sft_steps}"])
    sft_evals = sft.evaluations
    sft_s_per_step = training_s(sft) / args.sft_steps

    grpo = run_or_fail(
        workdir / f"grpo_{seed}",
        "apps.grpo",
        [
            f"--config-name={args.grpo_config}",
            *common,
            f"model.path={sft.run_dir / 'final_model'}",
            f"steps={args.grpo_steps}",
            *overrides["grpo"],
        ],
    )
    grpo_evals = grpo.evaluations
    if abs(grpo_evals[0]["eval/reward_mean"] - sft_evals[-1]["eval/reward_mean"]) > 1e-9:
        print(
            f"  note: GRPO's v0 evaluation {grpo_evals[0]['eval/reward_mean']:.3f} differs from SFT's last "
            f"{sft_evals[-1]['eval/reward_mean']:.3f} (not the same prompts, or not greedy?)"
        )
    grpo_s = training_s(grpo)
    extra = max(1, round(grpo_s / sft_s_per_step))
    alone = run_or_fail(workdir / f"sft_alone_{seed}", "apps.sft", [*sft_args, f"steps={args.sft_steps + extra}"])

    def curve(run: AppRun) -> str:
        return " ".join(f"v{e['eval/version']}:{e['eval/reward_mean']:.2f}" for e in run.evaluations)

    for name, run in (("SFT", sft), ("SFT+GRPO", grpo), ("SFT alone", alone)):
        print(f"  seed {seed} {name:9} {training_s(run):6.1f}s training | held-out reward {curve(run)}", flush=True)
    grpo_reward, alone_reward = grpo_evals[-1]["eval/reward_mean"], alone.evaluations[-1]["eval/reward_mean"]
    return {
        "seed": seed,
        "base": sft_evals[0]["eval/reward_mean"],
        "sft": sft_evals[-1]["eval/reward_mean"],
        "grpo": grpo_reward,
        "alone": alone_reward,
        "gain": grpo_reward - alone_reward,  # GRPO's held-out reward over SFT alone's at equal time
        "sft_s": training_s(sft),
        "grpo_s": grpo_s,
        "extra_steps": extra,
        "alone_s": training_s(alone),
        "grpo_samples_per_s": grpo.summary["samples_per_s"],
        "grpo_reward": (grpo.summary["reward_first"], grpo.summary["reward_last"]),
        "sft_run": sft.run_dir,
        "grpo_run": grpo.run_dir,
    }


def held_out_tokens(sft_run: Path, config_class=None) -> tuple[float, int, object]:
    """Mean length in tokens of the run's held-out prompts, their count, and the task, rebuilt as the run built them."""
    from omegaconf import OmegaConf
    from transformers import AutoConfig, AutoTokenizer

    from apps.sft.config import SFTConfig
    from forge_async.evaluation.evaluator import held_out_prompts
    from forge_async.envs.registry import build_task

    saved = OmegaConf.load(sft_run / "config.yaml")
    config = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(config_class or SFTConfig), saved))
    model = str(sft_run / "final_model")
    tokenizer = AutoTokenizer.from_pretrained(model)
    context = config.generator.max_model_len or AutoConfig.from_pretrained(model).max_position_embeddings
    room = context - config.sampling.max_tokens
    task = build_task(config.task, tokenizer, room)
    prompts = held_out_prompts(config.eval, task, config.task, tokenizer, room)
    return statistics.fmean(len(p.token_ids) for p in prompts), len(prompts), task


def entries_per_s(task, count: int) -> float:
    """reasoning-gym entries generated per second, in this process (the task's training mix)."""
    started = time.perf_counter()
    for i in range(count):
        task.train[i]
    return count / (time.perf_counter() - started)


def split_overrides(overrides: list[str]) -> dict[str, list[str]]:
    apps = {"sft": [], "grpo": []}
    for o in overrides:
        prefix, _, rest = o.partition(":")
        if prefix in apps and rest:
            apps[prefix].append(rest)
        else:
            for app in apps.values():
                app.append(o)
    return apps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sft-steps", type=int, default=450, help="N: SFT steps before GRPO")
    parser.add_argument("--grpo-steps", type=int, default=100, help="M: GRPO steps after SFT")
    parser.add_argument("--grpo-lr", type=float, default=1e-4, help="GRPO's trainer.lr")
    parser.add_argument("--grpo-temperature", type=float, default=0.7, help="GRPO's sampling.temperature")
    parser.add_argument("--eval-prompts", type=int, default=20, help="held-out prompts (every evaluation)")
    parser.add_argument("--sft-config", default="sft_reasoning_gym")
    parser.add_argument("--grpo-config", default="reasoning_gym")
    parser.add_argument("--entries", type=int, default=3000, help="entries timed for reasoning-gym's speed")
    parser.add_argument("--demos", type=int, help="K: SFT on a fixed file of K demonstrations (docstring)")
    parser.add_argument("--keep", help="keep the run directories under this folder")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every run; sft:KEY=V, grpo:KEY=V for one app")
    add_json_argument(parser)
    args = parser.parse_args()
    overrides = split_overrides(args.overrides)
    for key, value in (("trainer.lr", args.grpo_lr), ("sampling.temperature", args.grpo_temperature)):
        if not any(o.startswith(f"{key}=") for o in overrides["grpo"]):
            overrides["grpo"].insert(0, f"{key}={value}")
    if args.demos:  # the files outlive the runs' temporary folder only with --keep
        demo_dir = Path(args.keep or tempfile.mkdtemp(prefix="sft_then_grpo_demos_"))
        overrides["sft"] = [*write_demos(args, overrides["grpo"], demo_dir), *overrides["sft"]]
    print(
        f"SFT {args.sft_steps} steps, then GRPO {args.grpo_steps} steps; SFT alone for the same time. "
        f"Overrides: sft {overrides['sft']}, grpo {overrides['grpo']}",
        flush=True,
    )
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.keep) if args.keep else Path(tmp)
        for seed in args.seeds:
            started = time.perf_counter()
            results.append(one_seed(seed, args, overrides, workdir))
            print(f"  seed {seed}: {time.perf_counter() - started:.0f}s for its three runs, launch to exit", flush=True)
        if args.demos:  # the SFT runs' task is the demonstrations file: reasoning-gym's is the GRPO run's
            from forge_async.controller.config import GRPOConfig

            prompt_tokens, prompts, task = held_out_tokens(results[0]["grpo_run"], GRPOConfig)
        else:
            prompt_tokens, prompts, task = held_out_tokens(results[0]["sft_run"])
        speed = entries_per_s(task, args.entries)

    print(f"\nheld-out reward ({prompts} prompts, greedy); seconds: training time of the run (metrics.jsonl)")
    header = (
        f"{'seed':>4} {'base':>5} {'SFT':>5} {'SFT+GRPO':>8} {'SFT alone':>9} {'gain':>6} "
        f"{'SFT s':>6} {'GRPO s':>6} {'+k steps':>8} {'alone s':>7}"
    )
    print(header)
    for r in results:
        print(
            f"{r['seed']:>4} {r['base']:>5.2f} {r['sft']:>5.2f} {r['grpo']:>8.2f} {r['alone']:>9.2f} "
            f"{r['gain']:>+6.2f} {r['sft_s']:>6.1f} {r['grpo_s']:>6.1f} {r['extra_steps']:>8} "
            f"{r['alone_s']:>7.1f}"
        )
    mean = means(results)
    print(
        f"{'mean':>4} {mean['base']:>5.2f} {mean['sft']:>5.2f} {mean['grpo']:>8.2f} {mean['alone']:>9.2f} "
        f"{mean['gain']:>+6.2f} {mean['sft_s']:>6.1f} {mean['grpo_s']:>6.1f} {'':>8} "
        f"{mean['alone_s']:>7.1f}"
    )
    gains = [r["gain"] for r in results]
    print(
        f"GRPO's gain over SFT alone at equal time: min {min(gains):+.2f}, mean {mean['gain']:+.2f} "
        f"({sum(g >= 0.3 for g in gains)}/{len(gains)} seeds >= +0.30)"
    )
    grpo_rewards = ", ".join(f"{r['grpo_reward'][0]:.2f} -> {r['grpo_reward'][1]:.2f}" for r in results)
    print(f"GRPO training reward (sampled, first -> last 10 steps): {grpo_rewards}")
    print(f"tokens per held-out prompt: {prompt_tokens:.1f} (mean of {prompts})")
    print(
        f"reasoning-gym: {speed:,.0f} entries/s ({args.entries} entries, in-process) vs GRPO's "
        f"{mean['grpo_samples_per_s']:,.0f} samples/s: {speed / mean['grpo_samples_per_s']:,.0f}x"
    )
    if args.json:
        result_of(results, mean, speed, prompts).write(args.json)


def means(results: list[dict]) -> dict[str, float]:
    """The seeds' mean of each figure of the table and of GRPO's samples/s."""
    keys = ("base", "sft", "grpo", "alone", "gain", "sft_s", "grpo_s", "alone_s", "grpo_samples_per_s")
    return {k: statistics.fmean(r[k] for r in results) for k in keys}


EVALUATIONS = {"base": "base", "sft": "SFT", "grpo": "SFT+GRPO", "alone": "SFT alone"}


def result_of(results: list[dict], mean: dict[str, float], speed: float, prompts: int) -> BenchmarkResult:
    result = BenchmarkResult("sft_then_grpo", "SFT, then GRPO, against more SFT", this_command())
    result.figure("GRPO's gain over SFT alone at equal time (mean over seeds)", mean["gain"], "reward")
    for key, label in EVALUATIONS.items():
        result.figure(f"held-out reward, {label} (mean over seeds)", mean[key], "reward")
    result.figure("reasoning-gym entries/s", speed, "entries/s")
    result.figure("reasoning-gym entries/s over GRPO's samples/s", speed / mean["grpo_samples_per_s"], "x")
    columns = ["seed", *EVALUATIONS.values(), "gain", "SFT s", "GRPO s", "+k steps", "SFT alone s"]
    keys = (*EVALUATIONS, "gain", "sft_s", "grpo_s", "extra_steps", "alone_s")
    rows = [[r["seed"], *(r[k] for k in keys)] for r in results]
    rows.append(["mean", *(mean.get(k) for k in keys)])
    result.tables.append(Table(f"Held-out reward ({prompts} prompts, greedy); seconds of training", columns, rows))
    seeds = [str(r["seed"]) for r in results] + ["mean"]
    lines = [Line(label, seeds, [r[key] for r in results] + [mean[key]]) for key, label in EVALUATIONS.items()]
    result.series.append(
        Series(f"Held-out reward per seed ({prompts} prompts, greedy)", "seed", "reward", lines, bars=True)
    )
    return result


if __name__ == "__main__":
    main()
