"""The expert ids an MoE model's layers received in a forward."""

import torch

from forge_async.models.routes import moe_layers


def experts_taken(model) -> list[torch.Tensor]:
    """A forward's expert ids per MoE layer ([B, L, K], sorted), as the experts received them."""
    taken = []
    for layer in moe_layers(model):
        layer.routed_experts.register_forward_hook(
            lambda module, args, out: taken.append(args[2].sort(-1).values.clone())
        )
    return taken
