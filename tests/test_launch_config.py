"""Where a node finds its place: flags, torchrun's and Slurm's environment; placement checks."""

import pytest

from forge_async.errors import ConfigError
from forge_async.launch.nodes import NodeSpec, first_host
from forge_async.launch.placement import PlacementConfig


def resolve(environ: dict, **flags) -> NodeSpec:
    args = {"nnodes": None, "node_rank": None, "master_addr": None, "master_port": None, "join_timeout_s": None}
    return NodeSpec.resolve(**{**args, **flags}, environ=environ)


def test_flags_win_over_torchrun_environment_which_wins_over_slurm():
    slurm = {"SLURM_NNODES": "4", "SLURM_NODEID": "3", "SLURM_JOB_NODELIST": "gpu[007-010]"}
    assert resolve(slurm) == NodeSpec(4, 3, "gpu007", 29500)
    torchrun = {**slurm, "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"}
    assert resolve(torchrun) == NodeSpec(2, 1, "10.0.0.1", 1234)
    assert resolve(torchrun, node_rank=0, master_port=999) == NodeSpec(2, 0, "10.0.0.1", 999)
    assert resolve({}) == NodeSpec(1, 0, "127.0.0.1", 29500)
    assert resolve({"FORGE_ASYNC_JOIN_TIMEOUT": "7"}).join_timeout_s == 7.0


@pytest.mark.parametrize(
    "nodelist, first",
    [("node01", "node01"), ("gpu[003-005,9],cpu1", "gpu003"), ("a[1,4]", "a1"), ("h1,h2", "h1")],
)
def test_first_host_of_a_slurm_node_list(nodelist, first):
    assert first_host(nodelist) == first


@pytest.mark.parametrize(
    "flags, environ, named",
    [({"node_rank": 2, "nnodes": 2}, {}, "--node-rank=2"), ({}, {"NNODES": "two"}, "NNODES"),
     ({"master_port": 70000}, {}, "--master-port")],
)
def test_bad_node_specs_name_the_culprit(flags, environ, named):
    with pytest.raises(ConfigError, match=named):
        resolve(environ, **flags)


@pytest.mark.parametrize(
    "placement, named",
    [(PlacementConfig(trainer_hosts=[0, 2]), "consecutive"), (PlacementConfig(generator_hosts=[]), "empty"),
     (PlacementConfig(generator_hosts=[1, 1]), "twice"), (PlacementConfig(trainer_hosts=[3]), "node rank 3")],
)
def test_impossible_placements_fail_naming_the_key(placement, named):
    with pytest.raises(ConfigError, match=named):
        placement.check(nnodes=3)


def test_generators_spread_round_robin():
    placement = PlacementConfig(generator_hosts=[1, 2])
    placement.check(nnodes=3)
    assert [placement.generator_host(i) for i in range(5)] == [1, 2, 1, 2, 1]
