"""Mixture-of-Experts layers: TorchTitan's, computing what a Hugging Face Qwen3-MoE checkpoint
computes, with a router that can replay the routes the generator took.

TorchTitan's MoE is kept whole (its router, token dispatcher and grouped experts); two
of its defaults do not match a Qwen3-MoE checkpoint and are changed here:
- no load-balancing expert bias (the checkpoint has none: `load_balance_coeff=None`);
- the grouped experts compute in their input's dtype (TorchTitan's always cast to bf16,
  which costs an fp32 trainer its parity with the checkpoint).

Rollout routing replay (R3, arXiv 2510.11370): the generator records the top-k experts each
token went to (generation/route_capture.py); with replay on, the trainer's routers take those experts
and weight them by their own gate's scores, so the gate still gets gradients. `routes_given`
(models/routes.py) hands a forward's routes to every router; each router also compares them
with the experts it would have chosen itself (the route mismatch rate, logged with replay on
and off).
"""

import warnings
from dataclasses import dataclass

import spmd_types as spmd
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor
from torchtitan.models.common.config_utils import make_moe_config, make_routed_experts_config
from torchtitan.models.common.linear import Linear
from torchtitan.models.common.decoder import Decoder
from torchtitan.models.common.moe import MoE, GroupedExperts, TokenChoiceTopKRouter
from torchtitan.models.common.moe_sharding import set_moe_sharding_config

from forge_async.models.routes import GivenRoutes
from forge_async.models.shape import MoeShape

# TorchTitan's router computes its gate under an fp32 autocast, which CPU autocast does not
# offer: it warns and computes in the input's dtype (fp32, or FSDP's bf16).
warnings.filterwarnings("ignore", message="In CPU autocast, but the target dtype is not supported")


class ExactGroupedExperts(GroupedExperts):
    """TorchTitan's grouped experts (SwiGLU, one grouped matmul per projection) computed in the
    dtype the tokens arrive in: fp32 in an fp32 trainer, bf16 under FSDP's bf16 mixed precision."""

    @dataclass(kw_only=True, slots=True)
    class Config(GroupedExperts.Config):
        pass

    def forward(self, x_RD: torch.Tensor, num_tokens_per_expert_E: torch.Tensor) -> torch.Tensor:
        offsets = torch.cumsum(num_tokens_per_expert_E, dim=0, dtype=torch.int32)

        def project(a: torch.Tensor, weight: nn.Parameter) -> torch.Tensor:
            local = weight.to_local() if isinstance(weight, DTensor) else weight
            return self._grouped_mm(A=a, B_t=local.to(x_RD.dtype).transpose(-2, -1), offs=offsets)

        hidden = F.silu(project(x_RD, self.w1_EFD)) * project(x_RD, self.w3_EFD)
        return project(hidden, self.w2_EDF)


class ReplayableRouter(TokenChoiceTopKRouter):
    """TorchTitan's top-k router; given the generator's routes, it counts where its own choice
    differs and, when replaying, routes those tokens to the given experts, weighted by its own
    scores (renormalised and scaled as its config says)."""

    @dataclass(kw_only=True, slots=True)
    class Config(TokenChoiceTopKRouter.Config):
        pass

    def __init__(self, config: Config):
        super().__init__(config)
        self.given: GivenRoutes | None = None
        # of the last forward with routes given: (token routes that differ, token routes compared)
        self.last_mismatch: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(
        self, x_BLD: torch.Tensor, expert_bias_E: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        topk_scores, own_experts, scores = super().forward(x_BLD, expert_bias_E)
        given = self.given
        if given is None:
            return topk_scores, own_experts, scores
        with torch.no_grad():
            differs = (own_experts.sort(-1).values != given.experts.sort(-1).values).any(-1) & given.known
            self.last_mismatch = (differs.sum(), given.known.sum())
        if not given.replay:
            return topk_scores, own_experts, scores
        experts = torch.where(given.known.unsqueeze(-1), given.experts, own_experts)
        topk_scores = scores.gather(-1, experts)
        if self.route_norm:
            topk_scores = topk_scores / (topk_scores.sum(-1, keepdim=True) + 1e-20)
        return topk_scores * self.route_scale, experts, scores


def moe_config(dim: int, moe: MoeShape, linear_init: dict) -> MoE.Config:
    """A Qwen3-MoE block's MoE: softmax scores, top-k, renormalised when the checkpoint says so,
    no shared expert, no expert bias."""
    routed = make_routed_experts_config(
        dim=dim,
        hidden_dim=moe.ffn_dim,
        num_experts=moe.num_experts,
        top_k=moe.top_k,
        param_init=linear_init,
        comm_backend="standard",
    )
    inner = routed.inner_experts
    routed.inner_experts = ExactGroupedExperts.Config(
        dim=inner.dim,
        hidden_dim=inner.hidden_dim,
        num_experts=inner.num_experts,
        param_init={"w1_EFD": linear_init["weight"], "w2_EDF": linear_init["weight"], "w3_EFD": linear_init["weight"]},
    )
    router = ReplayableRouter.Config(
        num_experts=moe.num_experts,
        gate=Linear.Config(in_features=dim, out_features=moe.num_experts, bias=False, param_init=linear_init),
        top_k=moe.top_k,
        score_func="softmax",
        route_norm=moe.norm_topk_prob,
    )
    return make_moe_config(num_experts=moe.num_experts, router=router, routed_experts=routed, load_balance_coeff=None)


def split_experts(config: Decoder.Config) -> None:
    """Mark every MoE layer of `config` for expert parallelism: once the built model is
    parallelized over an "ep" mesh (models/parallelize.py), each rank holds its share of the
    experts and TorchTitan's all-to-all dispatcher sends tokens to them. The rest of the
    layer's sharding (tensor or sequence parallel) is declared too; with neither enabled it
    resolves to nothing."""
    # Only the names matter with expert parallelism (the placements are tensor parallelism's).
    layout = {"w1_EFD": spmd.S(1), "w2_EDF": spmd.S(2), "w3_EFD": spmd.S(1)}
    for layer in config.layers:
        if layer.moe is not None:
            set_moe_sharding_config(layer.moe, enable_ep=True, enable_sp=False, expert_param_layout=layout)
