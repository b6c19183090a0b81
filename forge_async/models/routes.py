"""The generator's routes in the trainer's MoE routers, and what a step's routing looked like.

Torch only (no TorchTitan): the trainer's actor module imports this, and the controller,
which spawns that actor, must not pay for TorchTitan. A router that takes routes is any
module with a `given` attribute (models/moe.py's ReplayableRouter); an MoE layer, any module
whose `router` is one, with TorchTitan's `tokens_per_expert_E` count.
"""

from contextlib import contextmanager
from dataclasses import dataclass
from collections.abc import Iterator
from typing import Protocol, cast

import torch
from torch import nn

from forge_async.models.shape import UNKNOWN_ROUTE


@dataclass
class GivenRoutes:
    """One forward's routes from the generator, for one MoE layer."""

    experts: torch.Tensor  # [B, L, K] int64 expert ids (0 where unknown)
    known: torch.Tensor  # [B, L] bool: the generator recorded this token's route
    replay: bool  # route by `experts` where known (else: only compare)


class RouteTaker(Protocol):
    """A router that takes routes (models/moe.py's ReplayableRouter)."""

    given: GivenRoutes | None
    # of the last forward with routes given: (token routes that differ, token routes compared)
    last_mismatch: tuple[torch.Tensor, torch.Tensor] | None


class MoeLayer(Protocol):
    """An MoE layer whose router takes routes, with TorchTitan's count of each expert's tokens."""

    router: RouteTaker
    tokens_per_expert_E: torch.Tensor


def moe_layers(model: nn.Module) -> list[MoeLayer]:
    """The model's MoE blocks, in layer order (the order of a route's layer axis)."""
    # A module is an MoE layer by its router's `given`: a test the type system cannot follow.
    return [cast(MoeLayer, module) for module in model.modules() if hasattr(getattr(module, "router", None), "given")]


@contextmanager
def routes_given(model: nn.Module, routes: torch.Tensor | None, replay: bool) -> Iterator[None]:
    """Within: each MoE layer's router holds its slice of `routes` ([B, L, layers, K] uint8, the
    generator's, UNKNOWN_ROUTE where it recorded none), replaying them when `replay`. Hold it over
    the backward too when activations are recomputed there, so the recomputation routes alike."""
    layers = moe_layers(model)
    if routes is None or not layers:
        yield
        return
    if routes.shape[2] != len(layers):
        raise ValueError(f"routes for {routes.shape[2]} MoE layers, the model has {len(layers)}")
    known = routes[..., 0] != UNKNOWN_ROUTE
    experts = torch.where(known.unsqueeze(-1), routes, 0).long()
    for i, layer in enumerate(layers):
        layer.router.given = GivenRoutes(experts[:, :, i], known[:, :, i], replay)
    try:
        yield
    finally:
        for layer in layers:
            layer.router.given = None


class RouteMismatch:
    """A step's route mismatch per MoE layer (token routes whose expert set differs from the
    generator's, and token routes compared), summed over its micro-batches."""

    def __init__(self, model: nn.Module):
        self.layers = moe_layers(model)
        self.differ = torch.zeros(len(self.layers))
        self.compared = torch.zeros(len(self.layers))

    def add_last_forward(self) -> None:
        """The counts of the forward just run (read before a recomputation can run it again)."""
        for i, layer in enumerate(self.layers):
            counts, layer.router.last_mismatch = layer.router.last_mismatch, None
            if counts is not None:
                self.differ[i] += counts[0].cpu()
                self.compared[i] += counts[1].cpu()


def take_expert_load(model: nn.Module) -> torch.Tensor:
    """[layers, experts]: tokens each expert received in training forwards since the last call
    (TorchTitan's own count; a recomputed forward counts twice, which shares do not see), then zeroed."""
    layers = moe_layers(model)
    load = torch.stack([layer.tokens_per_expert_E.detach().cpu().clone() for layer in layers])
    for layer in layers:
        layer.tokens_per_expert_E.zero_()
    return load


def moe_step_metrics(differ: torch.Tensor, compared: torch.Tensor, load: torch.Tensor) -> dict[str, float]:
    """A step's MoE figures: the route mismatch rate (overall and per layer; absent when no
    routes were given) and the load of the busiest expert over the mean (1 = balanced; per
    layer, the worst layer's)."""
    metrics = {}
    if compared.sum() > 0:
        metrics["moe/route_mismatch"] = (differ.sum() / compared.sum()).item()
        for i, (d, c) in enumerate(zip(differ.tolist(), compared.tolist())):
            metrics[f"moe/route_mismatch/layer_{i}"] = d / c if c else 0.0
    mean = load.mean(-1).clamp(min=1e-9)
    metrics["moe/expert_load_max"] = (load.amax(-1) / mean).max().item() if load.sum() > 0 else 1.0
    return metrics
