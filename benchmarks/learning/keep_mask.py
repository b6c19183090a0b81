"""Keep sampling mask: how far the trainer's logprobs are from the generator's under top-p, top-k
and min-p, with the kept sets and without, against untruncated sampling; and what recording and
using the sets costs.

For each tokenizer (`digits`: the CPU default's model; `bytes`: the text tasks' model) and seed,
a tiny random model, its output layer scaled by --logit-scale (a random tiny model's next-token
distributions are near uniform, which min-p cuts nothing of; a trained model's are peaked), is sampled by a real vLLM engine built as a generator with
sampling.keep_mask builds it (vLLM's processed logprobs, the kept-set capture of
generation/kept_set_capture.py), at each setting. The same rollouts are scored by the trainer's
TorchTitan model through the trainer's own packing and sliced softmax (losses/sliced_softmax.py):
over each token's kept set ("mask on", what the trainer trains with), over the whole vocabulary
against the generator's logprobs over what it kept ("mask off": the trainer ignoring the sets,
`is/mismatch_kl_unmasked`), and over the whole vocabulary against the generator's made whole by
each token's log mass ("whole", what `sampling.keep_mask=false` trains with). Per row: k3
KL(generator || trainer) per token and the max |logprob difference|, means over the seeds (with
their range), the kept sets' mean size and bytes per sampled token.

Costs, on the `digits` model at top-p 0.9: the generator's decode (tokens/s) with the capture
recording the sets, against the same engine recording each token's log mass only (keep_mask=false)
and against vLLM's raw-logprobs sampler (an untruncated run at temperature 1, which needs neither);
the trainer's forward + backward on the rollouts with their kept sets against without. Timed in
interleaved rounds (a shared box drifts); medians.

    .venv/bin/python -m benchmarks.learning.keep_mask [--seeds 3] [--rounds 5]
"""

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

import forge_async  # noqa: E402,F401
from benchmarks.harness.results import BenchmarkResult, Table, add_json_argument, this_command  # noqa: E402
from forge_async.actors.generator import sampling_params  # noqa: E402
from forge_async.data.batch import TrainBatch, pack_episodes  # noqa: E402
from forge_async.data.episode import Completion, Episode  # noqa: E402
from forge_async.generation.config import GeneratorConfig, SamplingConfig  # noqa: E402
from forge_async.generation.engine_weights import plain_cpu_weights  # noqa: E402
from forge_async.generation.kept_set_capture import KeptSetCapture  # noqa: E402
from forge_async.generation.platform import prepare_process  # noqa: E402
from forge_async.generation.versioned_engine import VersionedEngine  # noqa: E402
from forge_async.losses.grpo import response_logprobs  # noqa: E402
from forge_async.models.config import TinyModelConfig  # noqa: E402
from forge_async.models.hf_checkpoint import Checkpoint  # noqa: E402
from forge_async.models.tiny import create_tiny_checkpoint  # noqa: E402
from forge_async.models.titan import build_titan_model, load_frozen_model, state_dict_adapter  # noqa: E402

SETTINGS = {"untruncated": {}, "top-p 0.9": {"top_p": 0.9}, "top-k 8": {"top_k": 8}, "min-p 0.1": {"min_p": 0.1}}
TOKENIZERS = ("digits", "bytes")
PROMPTS = {"digits": [11, 3, 1, 4, 1, 5, 13], "bytes": None}  # bytes: the text below, encoded
TEXT_PROMPT = "Q: what is 12 + 30? A:"
COST_SETTING = "top-p 0.9"


def tiny_model(directory: Path, tokenizer: str, seed: int, logit_scale: float) -> Checkpoint:
    """A tiny random checkpoint whose logits are `logit_scale` times its initialisation's."""
    from safetensors.torch import load_file, save_file

    path = create_tiny_checkpoint(directory, TinyModelConfig(tokenizer=tokenizer, seed=seed))
    weights = load_file(path / "model.safetensors")
    weights["lm_head.weight"] *= logit_scale
    save_file(weights, path / "model.safetensors")
    return Checkpoint.open(path)


ENGINES = ("with kept sets", "log mass only", "raw logprobs")


def build_engine(checkpoint: Checkpoint, kind: str = ENGINES[0]) -> VersionedEngine:
    """A generator's engine (CPU, plain weights, prefix caching) of one of the ENGINES: as a
    generator with sampling.keep_mask builds it, as one with keep_mask=false at the same sampling
    (each token's log mass, no sets), or with vLLM's raw logprobs and no capture."""
    platform = prepare_process(GeneratorConfig())
    kept_sets = None if kind == ENGINES[2] else KeptSetCapture(cap=2**20, record_ids=kind == ENGINES[0])
    options = kept_sets.llm_kwargs() if kept_sets else {}
    from vllm import LLM

    with plain_cpu_weights(platform.plain_weights):
        llm = LLM(
            model=str(checkpoint.path),
            dtype="float32",
            max_model_len=checkpoint.shape.max_seq_len,
            seed=0,
            kv_cache_memory_bytes=2**27,
            **platform.llm_kwargs(),
            **VersionedEngine.llm_kwargs("abort_resume"),
            **options,
        )
    return VersionedEngine(llm, "abort_resume", kept_sets=kept_sets)


def prompt_ids(engine: VersionedEngine, tokenizer: str) -> list[int]:
    return PROMPTS[tokenizer] or engine.tokenizer.encode(TEXT_PROMPT, add_special_tokens=False)


def rollouts(engine: VersionedEngine, prompt: list[int], sampling: SamplingConfig, args) -> list[Completion]:
    params = sampling_params(sampling)
    requests = [engine.submit(prompt, params) for _ in range(args.samples)]
    while engine.has_work:
        engine.step()
    return [r.result for r in requests]


def mismatch(model, completions: list[Completion], temperature: float) -> dict[str, float]:
    """k3 and max |dlogp| of the trainer against the generator, over kept sets and without."""
    batch = pack_episodes([Episode(c, 0.0, 0.0) for c in completions], pad_id=0)
    with torch.no_grad():
        masked, _, unmasked, _ = response_logprobs(model, batch, temperature)
    on = batch.response_mask.bool()
    behaviour = batch.behaviour_logprobs[on].double()
    whole = torch.tensor([lp for c in completions for lp in c.whole_logprobs], dtype=torch.float64)
    figures = {}
    for name, logprobs, generator in (
        ("on", masked, behaviour),
        ("off", unmasked, behaviour),
        ("whole", unmasked, whole),
    ):
        d = logprobs[on].double() - generator  # float64: k3 of float32 noise is below float32's resolution
        figures[f"k3 {name}"] = (d.exp() - 1 - d).mean().item()
        figures[f"max {name}"] = d.abs().max().item()
    kept = [c.kept_sets for c in completions]
    with_set = sum(int((k.sizes > 0).sum()) for k in kept)
    figures["kept mean"] = sum(len(k.ids) for k in kept) / max(with_set, 1)
    figures["bytes/token"] = sum(k.nbytes for k in kept) / sum(len(c.token_ids) for c in completions)
    return figures


def measure_mismatch(args, root: Path) -> dict[tuple[str, str], list[dict]]:
    """(tokenizer, setting) -> one figures dict per seed."""
    rows: dict[tuple[str, str], list[dict]] = {}
    for tokenizer in TOKENIZERS:
        for seed in range(args.seeds):
            checkpoint = tiny_model(root / f"{tokenizer}{seed}", tokenizer, seed, args.logit_scale)
            engine = build_engine(checkpoint)
            model = load_frozen_model(checkpoint)
            prompt = prompt_ids(engine, tokenizer)
            for setting, truncation in SETTINGS.items():
                sampling = SamplingConfig(temperature=args.temperature, max_tokens=args.max_tokens, **truncation)
                figures = mismatch(model, rollouts(engine, prompt, sampling, args), sampling.logit_temperature)
                rows.setdefault((tokenizer, setting), []).append(figures)
                print(f"{tokenizer} seed {seed} {setting}: " + ", ".join(f"{k} {v:.3g}" for k, v in figures.items()))
            del engine
    return rows


def decode_cost(checkpoint: Checkpoint, args) -> dict[str, float]:
    """Median decode tokens/s at top-p 0.9 on three warm engines, in interleaved rounds."""
    engines = {kind: build_engine(checkpoint, kind) for kind in ENGINES}
    sampling = SamplingConfig(temperature=args.temperature, max_tokens=args.max_tokens, **SETTINGS[COST_SETTING])
    params = sampling_params(sampling)
    params.ignore_eos = True  # every completion the same length: the rounds do the same work
    prompt = PROMPTS["digits"]
    speeds: dict[str, list[float]] = {name: [] for name in engines}
    for i in range(args.rounds + 1):  # the first round warms the engines up, uncounted
        for name, engine in engines.items():
            requests = [engine.submit(prompt, params) for _ in range(args.decode_requests)]
            start = time.perf_counter()
            while engine.has_work:
                engine.step()
            if i:
                speeds[name].append(sum(len(r.result.token_ids) for r in requests) / (time.perf_counter() - start))
    return {name: statistics.median(s) for name, s in speeds.items()}


def train_cost(checkpoint: Checkpoint, completions: list[Completion], args) -> dict[str, float]:
    """Median ms of the trainer's forward + backward on the rollouts, with their kept sets and without."""
    model = build_titan_model(checkpoint.shape)
    model.load_state_dict(state_dict_adapter(checkpoint.shape).from_hf(checkpoint.load_hf_state_dict()))
    masked = pack_episodes([Episode(c, 0.0, 1.0) for c in completions], pad_id=0)
    batches = {"with kept sets": masked, "without": replace(masked, kept_tokens=None, kept_ids=None)}
    times: dict[str, list[float]] = {name: [] for name in batches}
    for i in range(args.rounds * 4 + 1):  # the first round warms up, uncounted
        for name, batch in batches.items():
            ms = _step_ms(model, batch, args.temperature)
            if i:
                times[name].append(ms)
    return {name: statistics.median(t) for name, t in times.items()}


def _step_ms(model, batch: TrainBatch, temperature: float) -> float:
    start = time.perf_counter()
    logprobs, entropy = response_logprobs(model, batch, temperature)[:2]
    (-(logprobs * batch.advantages * batch.response_mask).sum()).backward()
    model.zero_grad(set_to_none=True)
    return (time.perf_counter() - start) * 1e3


def spread(values: list[float]) -> str:
    mean = statistics.fmean(values)
    return f"{mean:.3g} ({min(values):.3g}-{max(values):.3g})" if len(values) > 1 else f"{mean:.3g}"


def result_of(rows, decode: dict[str, float], train: dict[str, float], args) -> BenchmarkResult:
    result = BenchmarkResult("keep_mask", "Keep sampling mask", this_command())
    table = []
    for (tokenizer, setting), seeds in rows.items():
        base = statistics.fmean(s["k3 on"] for s in rows[(tokenizer, "untruncated")])
        k3_on = [s["k3 on"] for s in seeds]
        table.append(
            [
                tokenizer,
                setting,
                round(statistics.fmean(s["kept mean"] for s in seeds), 1),
                round(statistics.fmean(s["bytes/token"] for s in seeds), 1),
                spread(k3_on),
                spread([s["k3 off"] for s in seeds]),
                spread([s["k3 whole"] for s in seeds]),
                round(statistics.fmean(k3_on) / base, 2) if base > 0 else "-",
                spread([s["max on"] for s in seeds]),
                spread([s["max off"] for s in seeds]),
                spread([s["max whole"] for s in seeds]),
            ]
        )
    columns = [
        "model",
        "sampling",
        "kept set (ids)",
        "bytes / token",
        "k3 mask on",
        "k3 mask off",
        "k3 whole",
        "k3 on / untruncated",
        "max |dlogp| on",
        "max |dlogp| off",
        "max |dlogp| whole",
    ]
    title = f"generator vs trainer, {args.seeds} seeds (mean, range), temperature {args.temperature}"
    result.tables.append(Table(title, columns, table))
    capture_cost = decode["log mass only"] / decode["with kept sets"] - 1
    result.figure("decode cost of recording the kept sets (top-p 0.9)", capture_cost, "fraction")
    result.figure(
        "decode cost against raw logprobs (top-p 0.9)",
        decode["raw logprobs"] / decode["with kept sets"] - 1,
        "fraction",
    )
    result.figure(
        "trainer forward + backward cost of the kept sets", train["with kept sets"] / train["without"] - 1, "fraction"
    )
    result.tables.append(
        Table("decode at top-p 0.9 (digits model)", ["engine", "tokens/s"], [[k, round(v)] for k, v in decode.items()])
    )
    result.tables.append(
        Table(
            "trainer forward + backward (digits model)", ["batch", "ms"], [[k, round(v, 2)] for k, v in train.items()]
        )
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=32, help="completions of the prompt per setting and seed")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--logit-scale", type=float, default=20.0, help="the tiny models' output layer, times this")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--decode-requests", type=int, default=32)
    add_json_argument(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = measure_mismatch(args, root)
        checkpoint = tiny_model(root / "cost", "digits", 0, args.logit_scale)
        decode = decode_cost(checkpoint, args)
        cost_sampling = SamplingConfig(
            temperature=args.temperature, max_tokens=args.max_tokens, **SETTINGS[COST_SETTING]
        )
        engine = build_engine(checkpoint)
        train = train_cost(checkpoint, rollouts(engine, PROMPTS["digits"], cost_sampling, args), args)
    result = result_of(rows, decode, train, args)
    result.print_summary()
    if args.json:
        result.write(args.json)


if __name__ == "__main__":
    main()
