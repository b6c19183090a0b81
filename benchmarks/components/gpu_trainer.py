"""The trainer's GPU path on its own: step time, tokens/s, peak memory and the weight publish.

    .venv/bin/python -m benchmarks.components.gpu_trainer            # every case, on the GPU
    .venv/bin/python -m benchmarks.components.gpu_trainer --cases dense compile --activation-checkpointing none
    .venv/bin/python -m benchmarks.components.gpu_trainer --scale tiny  # the same code, small shapes (CPU)
    .venv/bin/python -m benchmarks.components.gpu_trainer --scale tiny --vocab 151936 --episodes 128 \
        --micro-batch-tokens 8192 --cases dense                 # the vocabulary's memory, on CPU
    .venv/bin/python -m benchmarks.components.gpu_trainer --cases compile --softmax-slice-elements 134217728

Each case builds the trainer's own Learner (forge_async/learning/learner.py: the TorchTitan model
under FSDP2, the GRPO loss, AdamW) in a one-rank group this script starts (NCCL on a GPU,
gloo on CPU), takes `--steps` optimizer steps on one batch of random episodes, then
publishes three versions of the weights into a shared-memory channel as a run does, and
checks that the channel holds the last one byte for byte. Nothing
else of a run is here (no Monarch, vLLM or torchstore): this measures the trainer on a
machine that has a GPU and torch, and shows where its memory and time go.

The models are random, written locally in Hugging Face layout with the real vocabulary
(151,936 tokens: the output layer and its softmax are a large share of a small model's step):
- dense: Qwen3-0.6B's shape; 256 episodes of 128 prompt + 512 response tokens, as
  configs/grpo_gpu.yaml (bfloat16, micro-batches of 16,384 tokens, full activation
  checkpointing unless --activation-checkpointing says otherwise), eager;
- compile: the same with trainer.compile, as grpo_gpu runs (the first step compiles);
- lora: the same with LoRA rank 16 (the base frozen, only the adapters published);
- moe: a Qwen3-MoE of 8 layers, 32 experts, 8 per token, with the batch's routes (random)
  replayed (moe.routing_replay=rollout); the route mismatch is logged as in a run.
Printed per case: the first step (warm-up, compile) and the median of the rest, tokens/s,
peak GPU memory, and the publish (the third version's: its slot reused, as in a run; the
first's, into new files; and the third again with the shared memory left pageable, not
registered with CUDA). A case that fails is printed and the next one runs; the script then
exits non-zero. With --json, the same in the report's shape (benchmarks/harness/results.py).
"""

import argparse
import asyncio
import gc
import os
import shutil
import statistics
import tempfile
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import forge_async  # noqa: F401  (process-wide runtime settings)
from benchmarks.harness.results import BenchmarkResult, Table, add_json_argument, this_command
from forge_async.learning.config import TrainerConfig
from forge_async.learning.spec import LearnerSpec
from forge_async.data.episode import Completion, Episode
from forge_async.learning.learner import Learner, device_type
from forge_async.losses import sliced_softmax
from forge_async.models.hf_checkpoint import Checkpoint, save_config
from forge_async.models.config import LoraConfig, MoeConfig
from forge_async.models.tiny import write_tiny_weights
from forge_async.weights.config import WeightsConfig
from forge_async.weights.publisher import WeightPublisher, local_shard
from forge_async.weights.shared_memory import SharedMemoryChannel

CASES = ("dense", "lora", "moe", "compile")  # compile last: its first step is the longest
QWEN3_VOCAB = 151936


@dataclass
class Scale:
    """Model and batch sizes: `gpu` as configs/grpo_gpu.yaml runs, `tiny` to try the script on CPU."""

    vocab: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    moe_layers: int
    num_experts: int
    top_k: int
    moe_ffn_dim: int
    episodes: int
    prompt_tokens: int
    response_tokens: int
    group_size: int
    micro_batch_tokens: int


SCALES = {
    "gpu": Scale(QWEN3_VOCAB, 1024, 28, 16, 8, 3072, 8, 32, 8, 768, 256, 128, 512, 8, 16384),
    "tiny": Scale(512, 64, 2, 4, 2, 128, 2, 8, 2, 32, 16, 8, 24, 4, 128),
}


def hf_config(scale: Scale, moe: bool) -> dict:
    """A Qwen3 (or Qwen3-MoE) config.json of `scale`'s shape, head_dim 128 as Qwen3's (64 tiny)."""
    head_dim = 128 if scale.dim >= 1024 else 16
    config = {
        "architectures": ["Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"],
        "model_type": "qwen3_moe" if moe else "qwen3",
        "vocab_size": scale.vocab,
        "hidden_size": scale.dim,
        "intermediate_size": scale.ffn_dim,
        "num_hidden_layers": scale.moe_layers if moe else scale.n_layers,
        "num_attention_heads": scale.n_heads,
        "num_key_value_heads": scale.n_kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": not moe,  # as Qwen3-0.6B and Qwen3-30B-A3B
        "torch_dtype": "bfloat16",
    }
    if moe:
        config.update(
            num_experts=scale.num_experts,
            num_experts_per_tok=scale.top_k,
            moe_intermediate_size=scale.moe_ffn_dim,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        )
    return config


def model_checkpoint(root: Path, scale: Scale, moe: bool) -> Checkpoint:
    """The dense or MoE model's checkpoint under `root`, written the first time a case asks."""
    directory = root / ("moe" if moe else "dense")
    if not directory.exists():
        config = hf_config(scale, moe)
        directory.mkdir(parents=True)
        save_config(directory, config)
        write_tiny_weights(directory, config, seed=0)
    return Checkpoint.open(directory)


def random_batch(scale: Scale, moe_routes: tuple[int, int, int] | None = None, seed: int = 0) -> list[Episode]:
    """Groups of `group_size` responses to a shared prompt, random tokens, advantages +-0.5, sampled
    logprobs near a random model's (-ln V). `moe_routes`: (layers, experts, top_k) for random routes."""
    rng = np.random.default_rng(seed)
    batch = []
    for i in range(scale.episodes):
        if i % scale.group_size == 0:
            prompt = rng.integers(0, scale.vocab, scale.prompt_tokens).tolist()
        tokens = rng.integers(0, scale.vocab, scale.response_tokens).tolist()
        routes = None
        if moe_routes is not None:
            layers, experts, top_k = moe_routes
            rows = len(prompt) + len(tokens) - 1
            routes = np.argsort(rng.random((rows, layers, experts)), axis=-1)[..., :top_k].astype(np.uint8)
        completion = Completion(
            prompt_ids=prompt,
            token_ids=tokens,
            logprobs=[-float(np.log(scale.vocab))] * len(tokens),
            versions=[0] * len(tokens),
            text="",
            finish_reason="length",
            routes=routes,
        )
        batch.append(
            Episode(completion, reward=float(i % 2), advantage=float(i % 2) - 0.5, group_id=i // scale.group_size)
        )
    return batch


def trainer_config(checkpointing: str, micro_batch_tokens: int) -> TrainerConfig:
    """configs/grpo_gpu.yaml's trainer, eager (the compile case turns compile on)."""
    return TrainerConfig(
        lr=1e-6,
        beta2=0.999,
        dtype="bfloat16",
        micro_batch_tokens=micro_batch_tokens,
        activation_checkpointing=checkpointing,
        lr_schedule="constant",
        compile=False,
    )


def run_case(name: str, scale: Scale, config: TrainerConfig, steps: int, root: Path) -> dict:
    """One case's figures: a fresh Learner, `steps` steps on one batch, three publishes."""
    moe = name == "moe"
    checkpoint = model_checkpoint(root, scale, moe)
    batch = random_batch(scale, (scale.moe_layers, scale.num_experts, scale.top_k) if moe else None)
    learner = Learner(
        LearnerSpec(
            str(checkpoint.path),
            replace(config, compile=name == "compile"),
            pad_id=0,
            lora=LoraConfig(rank=16, alpha=32.0) if name == "lora" else None,
            moe=MoeConfig("rollout") if moe else None,
        )
    )
    step_s, metrics = [], {}
    for _ in range(steps):
        start = time.perf_counter()
        metrics = learner.train_step(batch).metrics  # ends in .item(): the GPU's work is done
        step_s.append(time.perf_counter() - start)
    tokens = sum(len(e.completion.prompt_ids) + len(e.completion.token_ids) for e in batch)
    steady = statistics.median(step_s[1:]) if len(step_s) > 1 else step_s[0]
    publish_s, weight_bytes = publish_three_versions(learner, root / f"{name}-channel")
    pageable_s, _ = publish_three_versions(learner, root / f"{name}-pageable", page_lock=False)
    figures = {
        "case": name,
        "params": sum(p.numel() for p in learner.model.parameters()),
        "trainable": sum(p.numel() for p in learner.trainable),
        "first_step_s": step_s[0],
        "step_s": steady,
        "tokens_per_s": tokens / steady,
        "response_tokens_per_s": metrics["train/response_tokens"] / steady,
        "peak_memory_gib": metrics["train/peak_memory_gib"],
        "loss": metrics["train/loss"],
        "grad_norm": metrics["train/grad_norm"],
        "first_publish_s": publish_s[0],
        "publish_s": publish_s[-1],
        "pageable_publish_s": pageable_s[-1],
        "published_gib": weight_bytes / 2**30,
        **{k: v for k, v in metrics.items() if k.startswith("moe/route_mismatch") and "layer" not in k},
    }
    return figures


def publish_three_versions(learner: Learner, fallback: Path, page_lock: bool = True) -> tuple[list[float], int]:
    """Seconds to publish each of three versions as the trainer does (the bf16 Hugging Face state
    dict, copied into a shared-memory channel), and the bytes of one. The channel's two slots are
    new files for the first two (their pages are touched for the first time); the third reuses
    the first's, as every publish of a run does from its third version on. The channel is under
    /dev/shm, as a run's, where that has room for two versions (a container's can be small);
    else at `fallback`. `page_lock=False`: into pageable memory (the publisher's option)."""
    size = sum(t.numel() * t.element_size() for t in learner.published_state_dict().values())
    shm = Path("/dev/shm")
    roomy = shm.is_dir() and shutil.disk_usage(shm).free > 3 * size
    channel = Path(tempfile.mkdtemp(prefix="gpu_trainer-", dir=shm)) if roomy else fallback
    publisher = WeightPublisher(WeightsConfig(channel_dir=str(channel)), page_lock=page_lock)
    seconds = []
    for version in range(learner.version, learner.version + 3):
        start = time.perf_counter()
        weight_bytes = asyncio.run(publisher.publish(version, learner.published_state_dict(), ("shm",)))
        seconds.append(time.perf_counter() - start)
    check_published(publisher.channel, version, learner.published_state_dict())
    publisher.close()
    shutil.rmtree(channel, ignore_errors=True)
    return seconds, weight_bytes


def check_published(channel: SharedMemoryChannel, version: int, state_dict: dict[str, torch.Tensor]) -> None:
    """The channel holds `version` byte for byte as `state_dict` (a one-rank group: whole tensors)."""
    with channel.reading(version) as (found, published):
        wrong = [
            name
            for name, tensor in state_dict.items()
            if not torch.equal(published[name], local_shard(tensor)[0].cpu())
        ]
    if found != version or wrong:
        raise AssertionError(
            f"published version {found} (expected {version}) differs in {len(wrong)} tensors, e.g. {wrong[:3]}"
        )


def start_group() -> None:
    """A one-rank torch.distributed group on this machine (what the trainer's procs have)."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    if device_type() == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if device_type() == "cuda" else "gloo", rank=0, world_size=1)


# The table's columns: (title, key of a case's figures); a case without the key leaves it empty.
COLUMNS = [
    ("case", "case"),
    ("parameters", "params"),
    ("trained", "trainable"),
    ("step s", "step_s"),
    ("first step s", "first_step_s"),
    ("tokens/s", "tokens_per_s"),
    ("peak GiB", "peak_memory_gib"),
    ("loss", "loss"),
    ("grad norm", "grad_norm"),
    ("published GiB", "published_gib"),
    ("publish s", "publish_s"),
    ("first publish s", "first_publish_s"),
    ("pageable publish s", "pageable_publish_s"),
    ("route mismatch", "moe/route_mismatch"),
]


def print_case(f: dict) -> None:
    print(
        f"{f['case']:8s} {f['params'] / 1e6:7.0f}M params ({f['trainable'] / 1e6:.1f}M trained): "
        f"step {f['step_s']:.2f} s (first {f['first_step_s']:.1f} s), {f['tokens_per_s']:,.0f} tokens/s "
        f"({f['response_tokens_per_s']:,.0f} response), peak {f['peak_memory_gib']:.1f} GiB, "
        f"loss {f['loss']:.4f}, grad norm {f['grad_norm']:.3f}, "
        f"publish {f['published_gib']:.2f} GiB in {f['publish_s'] * 1e3:.0f} ms (first {f['first_publish_s'] * 1e3:.0f} ms, "
        f"into pageable memory {f['pageable_publish_s'] * 1e3:.0f} ms)"
        + (f", route mismatch {f['moe/route_mismatch']:.2f}" if "moe/route_mismatch" in f else ""),
        flush=True,
    )


def benchmark_result(cases: list[dict], failed: dict[str, str], scale: str, config: TrainerConfig) -> BenchmarkResult:
    """The cases in the report's shape: per case its step, throughput and peak as figures, and
    everything in one table (a failed case: a row that says so)."""
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    result = BenchmarkResult("gpu_trainer", f"The trainer alone on {device}", this_command())
    for f in cases:
        result.figure(f"{f['case']}: step", f["step_s"], "s")
        result.figure(f"{f['case']}: tokens/s", f["tokens_per_s"], "tokens/s")
        result.figure(f"{f['case']}: peak memory", f["peak_memory_gib"], "GiB")
        result.figure(f"{f['case']}: publish", f["publish_s"], "s")
        result.figure(f"{f['case']}: publish into pageable memory", f["pageable_publish_s"], "s")
    rows = [[f.get(key, "") for _, key in COLUMNS] for f in cases]
    rows += [
        [name, f"failed: {why.strip().splitlines()[-1]}"] + [""] * (len(COLUMNS) - 2) for name, why in failed.items()
    ]
    title = f"{scale} scale, activation checkpointing {config.activation_checkpointing}, micro-batches of {config.micro_batch_tokens} tokens"
    result.tables.append(Table(title, [title for title, _ in COLUMNS], rows))
    return result


def positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--steps", type=positive, default=4, help="optimizer steps per case (the first warms up)")
    parser.add_argument(
        "--scale",
        choices=sorted(SCALES),
        default="gpu" if torch.cuda.is_available() else "tiny",
        help="model and batch sizes (default: gpu where a GPU is seen, else tiny)",
    )
    parser.add_argument(
        "--activation-checkpointing",
        choices=("none", "full", "selective"),
        default="full",
        help="trainer.activation_checkpointing (default: grpo_gpu's)",
    )
    parser.add_argument("--micro-batch-tokens", type=positive, help="trainer.micro_batch_tokens (default: the scale's)")
    parser.add_argument("--vocab", type=positive, help="the models' vocabulary size (default: the scale's)")
    parser.add_argument("--episodes", type=positive, help="episodes in the batch (default: the scale's)")
    parser.add_argument(
        "--softmax-slice-elements",
        type=positive,
        help=f"elements (tokens x vocabulary) of one slice of the vocabulary's softmax (default: {sliced_softmax.SLICE_ELEMENTS})",
    )
    add_json_argument(parser)
    args = parser.parse_args(argv)
    scale = SCALES[args.scale]
    scale = replace(
        scale,
        vocab=args.vocab if args.vocab is not None else scale.vocab,
        episodes=args.episodes if args.episodes is not None else scale.episodes,
    )
    micro_batch_tokens = args.micro_batch_tokens if args.micro_batch_tokens is not None else scale.micro_batch_tokens
    config = trainer_config(args.activation_checkpointing, micro_batch_tokens)
    if args.softmax_slice_elements is not None:  # a module constant: this process's trainer only
        sliced_softmax.SLICE_ELEMENTS = args.softmax_slice_elements
    start_group()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    print(
        f"{args.scale} scale; torch {torch.__version__}, GPU {gpu}, {os.cpu_count()} CPUs; "
        f"softmax slices of {sliced_softmax.SLICE_ELEMENTS:,} elements",
        flush=True,
    )
    cases, failed = [], {}
    try:
        with tempfile.TemporaryDirectory(prefix="gpu_trainer-") as root:
            for name in args.cases:
                try:
                    cases.append(run_case(name, scale, config, args.steps, Path(root)))
                    print_case(cases[-1])
                except Exception:  # one case's failure is a finding: the next case still runs
                    failed[name] = traceback.format_exc()
                    print(f"{name}: FAILED\n{failed[name]}", flush=True)
                gc.collect()  # the case's learner, before the next one allocates its own
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                if args.json:  # after each case: a run stopped at a time limit keeps what it measured
                    benchmark_result(cases, failed, args.scale, config).write(args.json)
    finally:
        dist.destroy_process_group()
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
