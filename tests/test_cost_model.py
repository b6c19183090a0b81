"""benchmarks/model/cost_model.py: the cost model behaves as derived (pure arithmetic, no runs)."""

import itertools
import json
from dataclasses import replace

import pytest

from benchmarks.model.cost_model import (
    Inputs,
    aligned,
    batch_s,
    check_rows,
    checked_runs,
    link_to_unbind_gbit,
    predict,
    simulate_step_s,
    transfer_s,
    weights_bound_s,
)

pytestmark = pytest.mark.unit

# 8B bf16, 24 generator hosts, g = 10 s: train-bound on a fast link.
BASE = Inputs(
    model_bytes=16e9,
    link_gbit=400,
    memcpy_gbs=20,
    hosts=24,
    train_s=20,
    generate_s=240,
    max_policy_age=1,
    latency_ms=5,
)
LINKS = [1, 3, 10, 30, 100, 300, 1000, 3000, 10000, 30000]


def test_the_bottleneck_moves_from_train_to_weights_as_the_link_slows():
    named = [predict(replace(BASE, link_gbit=link)).bottleneck for link in (3200, 400, 100, 10)]
    assert named == ["train", "train", "weights", "weights"]


def test_a_slow_generator_fleet_is_named():
    assert predict(replace(BASE, hosts=2, link_gbit=10000)).bottleneck == "generate"


def test_star_and_tree_take_the_same_time_for_one_host():
    for bytes_, link, memcpy in itertools.product([5e5, 16e9], [1, 400], [1, 20]):
        one = replace(BASE, hosts=1, model_bytes=bytes_, link_gbit=link, memcpy_gbs=memcpy)
        assert transfer_s(one, "star") == pytest.approx(transfer_s(one, "tree"))


def test_a_tree_sends_fewer_copies_than_a_star_from_three_hosts():
    for hosts in (3, 7, 24, 31):
        assert transfer_s(replace(BASE, hosts=hosts), "tree") < transfer_s(replace(BASE, hosts=hosts), "star")


def test_a_tree_takes_one_copy_time_per_doubling_of_the_hosts_holding_the_version():
    network_only = replace(BASE, memcpy_gbs=1e15, latency_ms=0)
    one_copy_s = BASE.model_bytes / (BASE.link_gbit * 1e9 / 8)
    copies = [transfer_s(replace(network_only, hosts=h), "tree") / one_copy_s for h in (1, 2, 3, 7, 8, 24, 31)]
    assert copies == pytest.approx([1, 2, 2, 3, 4, 5, 5], rel=1e-6)


def test_steps_per_s_never_falls_as_the_link_gets_faster():
    for topology, age in itertools.product(("star", "tree"), (0, 1, 2, 4)):
        rates = [predict(replace(BASE, link_gbit=link, max_policy_age=age), topology).steps_per_s for link in LINKS]
        assert rates == sorted(rates)
        assert rates[0] < rates[-1]


def test_max_policy_age_0_is_the_synchronous_loop():
    sync = replace(BASE, max_policy_age=0)
    assert predict(sync).step_s == pytest.approx(BASE.train_s + transfer_s(sync, "star") + batch_s(sync))


def test_relays_sending_back_to_back_advance_max_age_plus_1_versions_per_two_transfers():
    for age in (1, 2, 3, 5):
        assert weights_bound_s(1.0, 0.5, 30.0, age) == pytest.approx(60.0 / (age + 1))
        assert simulate_step_s(1.0, 0.5, 30.0, age) == pytest.approx(60.0 / (age + 1), rel=0.01)


def test_the_formula_is_exact_when_no_version_is_skipped():
    for train, batch, transfer, age in itertools.product([1.0], [0.2, 0.9, 1.5], [0.0, 0.3, 0.9], [0, 1, 2, 4]):
        step = max(train, batch, weights_bound_s(train, batch, transfer, age))
        assert step >= transfer  # every version is delivered
        assert simulate_step_s(train, batch, transfer, age) == pytest.approx(step, rel=0.01)


def test_where_versions_are_skipped_the_formula_is_an_upper_bound_within_1_5x():
    grid = itertools.product([1.0], [0.2, 0.9, 1.2, 2.0], [0.5, 1.3, 2.0, 2.7, 3.7, 8.0], [1, 2, 3, 5])
    for train, batch, transfer, age in grid:
        step = max(train, batch, weights_bound_s(train, batch, transfer, age))
        assert step <= simulate_step_s(train, batch, transfer, age) * 1.01
        assert simulate_step_s(train, batch, transfer, age) <= step * 1.5


@pytest.mark.parametrize("topology", ["star", "tree"])
@pytest.mark.parametrize("age", [1, 2, 3])
def test_the_link_to_unbind_is_where_weights_stop_being_the_bottleneck(topology, age):
    inputs = replace(BASE, generate_s=400, max_policy_age=age)
    link = link_to_unbind_gbit(inputs, topology)
    assert predict(replace(inputs, link_gbit=link * 1.01), topology).bottleneck != "weights"
    assert predict(replace(inputs, link_gbit=link * 0.99), topology).bottleneck == "weights"


def test_no_link_unbinds_the_synchronous_loop():
    assert link_to_unbind_gbit(replace(BASE, max_policy_age=0), "star") == float("inf")


def test_check_compares_each_run_with_its_prediction(tmp_path):
    run = {"hosts": 3, "model_bytes": 16e9, "train_s": 20, "generate_s": 240, "link_gbit": 400}
    predicted = predict(replace(BASE, hosts=3)).steps_per_s
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps([{**run, "name": "half", "measured_steps_per_s": predicted / 2}]))
    [header, row] = aligned(check_rows(checked_runs(runs, BASE))).splitlines()
    assert header.split()[:3] == ["run", "hosts", "topology"]
    assert row.split()[:3] == ["half", "3", "star"] and row.split()[6] == "0.5"
