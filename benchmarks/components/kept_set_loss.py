"""The trainer's loss stage with kept sets at a real vocabulary: what masking each token's softmax
to the set its sampler kept costs (sampling.keep_mask, losses/sliced_softmax.py), on a GPU where
there is one.

One micro-batch's last stage, as the trainer runs it: hidden states [tokens, hidden] through the
output layer [vocabulary, hidden] to logits, then the sliced softmax (log-probability and entropy
of each chosen token) and a loss, forward and backward; once with every token carrying a kept
set, once without. The sets' sizes are drawn from a geometric distribution of mean --mean-set
(top-p on a trained model keeps a few to hundreds of tokens), at most --cap, each holding its
token. The output layer is the one large matrix product of this stage, so the overhead against
it bounds the overhead against a whole step from above. Also checked: the masked log-probabilities
of some tokens, and their gradients, against a float64 computation on the CPU.

    .venv/bin/python -m benchmarks.components.kept_set_loss                      # Qwen3-0.6B's shapes
    .venv/bin/python -m benchmarks.components.kept_set_loss --tokens 1024 --vocab 4096  # a CPU-sized run
"""

import argparse
import statistics
import time

import torch

from benchmarks.harness.results import BenchmarkResult, Table, add_json_argument, this_command
from forge_async.losses.sliced_softmax import Distribution, KeptIds, sampled_logprobs_and_entropy


def kept_sets(targets: torch.Tensor, vocab: int, mean: float, cap: int, gen: torch.Generator) -> KeptIds:
    """Random sets, each holding its target first (the sampled token is always kept)."""
    sizes = torch.distributions.Geometric(probs=torch.tensor(1 / mean)).sample((len(targets),)).long() + 1
    sizes = sizes.clamp(max=cap)
    tokens = torch.repeat_interleave(torch.arange(len(targets)), sizes)
    ids = torch.randint(0, vocab, (len(tokens),), generator=gen)
    ids[torch.cumsum(sizes, 0) - sizes] = targets  # each set's first id
    keys = torch.unique(tokens * vocab + ids)  # each id once a set, ascending by token
    return KeptIds(keys // vocab, keys % vocab)


def stage_ms(hidden, weight, targets, distribution: Distribution, device: str) -> float:
    """One forward + backward of the output layer and the sliced softmax."""
    sync(device)
    start = time.perf_counter()
    logits = hidden @ weight.T
    index = torch.arange(len(targets), device=hidden.device)
    logprobs, entropy = sampled_logprobs_and_entropy(logits, index, targets, distribution=distribution)[:2]
    (-(logprobs.sum() + 0.01 * entropy.sum())).backward()
    sync(device)
    hidden.grad = weight.grad = None
    return (time.perf_counter() - start) * 1e3


def softmax_ms(logits, targets, distribution: Distribution, device: str) -> float:
    """The sliced softmax alone, forward + backward."""
    sync(device)
    start = time.perf_counter()
    index = torch.arange(len(targets), device=logits.device)
    logprobs, entropy = sampled_logprobs_and_entropy(logits, index, targets, distribution=distribution)[:2]
    (-(logprobs.sum() + 0.01 * entropy.sum())).backward()
    sync(device)
    logits.grad = None
    return (time.perf_counter() - start) * 1e3


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def worst_errors(logits, targets, kept: KeptIds, rows: int) -> tuple[float, float]:
    """Max |masked log-probability - a float64 CPU computation| and the same of the gradient of
    sum(log p + entropy) with respect to the logits, over the first `rows` tokens."""
    near = kept.tokens < rows
    sub = KeptIds(kept.tokens[near], kept.ids[near])
    x = logits[:rows].detach().clone().requires_grad_()
    index = torch.arange(rows, device=x.device)
    got = sampled_logprobs_and_entropy(x, index, targets[:rows], distribution=Distribution(1.0, sub))
    (got.logprobs.sum() + got.entropy.sum()).backward()
    z = logits[:rows].detach().double().cpu().requires_grad_()
    masked = torch.ones_like(z, dtype=torch.bool)  # every token here has a set
    masked[sub.tokens.cpu(), sub.ids.cpu()] = False
    log_p = z.masked_fill(masked, -torch.inf).log_softmax(-1)
    want = log_p.gather(-1, targets[:rows, None].cpu()).squeeze(-1)
    entropy = -(log_p.exp() * log_p.masked_fill(masked, 0.0)).sum(-1)
    (want.sum() + entropy.sum()).backward()
    value_error = (got.logprobs.double().cpu() - want.detach()).abs().max().item()
    return value_error, (x.grad.double().cpu() - z.grad).abs().max().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=16384, help="a micro-batch (configs/grpo_gpu.yaml's budget)")
    parser.add_argument("--vocab", type=int, default=151936, help="Qwen3's vocabulary")
    parser.add_argument("--hidden", type=int, default=1024, help="Qwen3-0.6B's width")
    parser.add_argument("--mean-set", type=float, default=32.0)
    parser.add_argument("--cap", type=int, default=1024, help="sampling.kept_set_cap's default")
    parser.add_argument("--rounds", type=int, default=10)
    add_json_argument(parser)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    gen = torch.Generator().manual_seed(0)
    targets = torch.randint(0, args.vocab, (args.tokens,), generator=gen)
    kept = kept_sets(targets, args.vocab, args.mean_set, args.cap, gen)
    targets = targets.to(device)
    kept = KeptIds(kept.tokens.to(device), kept.ids.to(device))
    hidden = (torch.randn(args.tokens, args.hidden, generator=gen) / args.hidden**0.5).to(device, dtype)
    weight = (torch.randn(args.vocab, args.hidden, generator=gen)).to(device, dtype)
    hidden.requires_grad_(), weight.requires_grad_()
    with torch.no_grad():
        logits = (hidden @ weight.T).requires_grad_()
    cases = {"with kept sets": Distribution(1.0, kept), "without": Distribution()}
    stage = {name: [] for name in cases}
    softmax = {name: [] for name in cases}
    peak = {}
    for i in range(args.rounds + 1):  # the first round warms up, uncounted
        for name, distribution in cases.items():
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            s = stage_ms(hidden, weight, targets, distribution, device)
            peak[name] = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
            f = softmax_ms(logits, targets, distribution, device)
            if i:
                stage[name].append(s)
                softmax[name].append(f)
    value_error, grad_error = worst_errors(logits.detach(), targets, kept, rows=64)
    med = {name: (statistics.median(stage[name]), statistics.median(softmax[name])) for name in cases}
    result = BenchmarkResult("kept_set_loss", "The loss stage with kept sets", this_command())
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    result.figure("sliced softmax cost of the kept sets", med["with kept sets"][1] / med["without"][1] - 1, "fraction")
    result.figure(
        "output layer + softmax cost of the kept sets", med["with kept sets"][0] / med["without"][0] - 1, "fraction"
    )
    result.figure("max |logprob error| against float64", value_error, "nats")
    result.figure("max |gradient error| against float64", grad_error, "")
    sizes = torch.bincount(kept.tokens.cpu(), minlength=args.tokens).float()
    result.tables.append(
        Table(
            f"{args.tokens} tokens x {args.vocab} vocabulary, hidden {args.hidden}, {dtype}, {where}; "
            f"kept sets of mean {sizes.mean():.1f} ids (max {int(sizes.max())})",
            ["batch", "output layer + softmax (ms)", "softmax alone (ms)", "peak memory (GiB)"],
            [[name, round(m[0], 2), round(m[1], 2), round(peak[name], 2)] for name, m in med.items()],
        )
    )
    result.print_summary()
    if args.json:
        result.write(args.json)


if __name__ == "__main__":
    main()
