"""Several hosts, simulated with network namespaces (forge_async/cluster/netns.py): launch, placement, failures.

Every node runs `python -m forge_async.cluster ... -- apps.grpo ...` as a user would on a
cluster; each has its own address (192.0.2.0/24), hostname and /dev/shm, so the
trainer's shared-memory channel cannot reach a generator on another node: weights must
cross through torchstore and that node's relay.
"""

import json
import os
import signal
import statistics
import subprocess
import time

import pytest

from forge_async.cli.subprocess_run import run_app
from forge_async.cluster.netns import available, launch_command, simulated_hosts
from forge_async.observability.metrics import read_rows

# Outside CI a machine without root or iproute2 skips these; CI (CI=true) never skips them.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(available() is not None and not os.environ.get("CI"), reason=str(available())),
]


def launch(cluster, run_dir, *overrides: str, nodes: int, port: int = 29400) -> list[subprocess.Popen]:
    """Start the launcher on every node (node 0 last); each node's output goes to run_dir/../nodeI.log."""
    procs = {
        node: start_node(cluster, run_dir, node, *overrides, nodes=nodes, port=port) for node in reversed(range(nodes))
    }
    return [procs[i] for i in range(nodes)]


def start_node(
    cluster, run_dir, node: int, *overrides: str, nodes: int, port: int = 29400, log: str = ""
) -> subprocess.Popen:
    """The launcher of node `node`, its output to run_dir/../node{node}{log}.log."""
    app = ["apps.grpo", f"hydra.run.dir={run_dir}", *overrides]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    out = open(run_dir.parent / f"node{node}{log}.log", "w")
    return cluster.start(
        node, launch_command(nodes, node, *app, port=port), stdout=out, stderr=subprocess.STDOUT, text=True
    )


def output(run_dir, node: int) -> str:
    return (run_dir.parent / f"node{node}.log").read_text()


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]


def wait_for_step(node0: subprocess.Popen, run_dir, step: int, timeout: float = 300) -> None:
    """Until node 0's console shows step `step` (failing if the run ends or takes too long)."""
    deadline = time.monotonic() + timeout
    while f"step {step:>4}/" not in output(run_dir, 0):
        assert time.monotonic() < deadline and node0.poll() is None, output(run_dir, 0)[-3000:]
        time.sleep(0.2)


def read_metrics(run_dir) -> list[dict]:
    """metrics.jsonl's step rows (evaluation rows aside)."""
    return read_rows(run_dir)[0]


def test_two_hosts_trainer_on_node0_generator_on_node1_learns(tmp_path):
    run_dir = tmp_path / "run"
    with simulated_hosts(2) as cluster:
        procs = launch(cluster, run_dir, "steps=40", "placement.generator_hosts=[1]", nodes=2)
        codes = wait_all(procs, timeout=400)
        assert codes == [0, 0], output(run_dir, 0)[-3000:] + output(run_dir, 1)[-2000:]
        assert cluster.pids(0) == [] and cluster.pids(1) == []  # nothing left behind
        assert [cluster.run(node, ["ls", "-A", "/dev/shm"]).stdout for node in (0, 1)] == ["", ""]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["placement"] == {"trainer": [0], "generators": [1]}
    assert summary["accounting_ok"] and summary["steps"] == 40
    procs_file = json.loads((run_dir / "procs.json").read_text())
    assert procs_file["generator0"]["host"] == "node1" and procs_file["trainer"][0]["host"] == "node0"
    # Weights crossed once to node 1, from node 0's sender to node 1's relay, over gloo (no store).
    assert procs_file["weight_sender"]["node"] == 0 and procs_file["weight_relay1"]["node"] == 1
    assert summary["torchstore_versions"] == []
    [relay] = summary["weight_receivers"]
    assert relay["link_failures"] == 0 and relay["version"] >= 38, relay  # (it may be sending the last ones)
    # Staleness bounds hold across hosts: nothing stale.
    metrics = read_metrics(run_dir)
    assert max(m["policy/age_max"] for m in metrics) <= 1 and summary["dropped_stale"] == 0
    rewards = [m["reward/mean"] for m in metrics]
    assert statistics.fmean(rewards[-8:]) - statistics.fmean(rewards[:8]) > 0.08, rewards
    # Evaluations ran on the generator of node 1, each on one version of the weights its relay brought.
    versions = [e["eval/version"] for e in read_rows(run_dir)[1]]
    assert versions[0] == 0 and versions[-1] == 40 and versions == sorted(set(versions)), versions


def test_fsdp_across_two_hosts_computes_what_one_host_computes(tmp_path):
    common = ("mode=sync", "steps=3", "checkpoint.every_steps=0", "trainer.procs=1")
    with simulated_hosts(3) as cluster:
        run_dir = tmp_path / "three_hosts" / "run"
        procs = launch(
            cluster,
            run_dir,
            *common,
            "placement.trainer_hosts=[0,1]",
            "placement.generator_hosts=[2]",
            "weights.cross_host=torchstore",
            nodes=3,
        )
        codes = wait_all(procs, timeout=400)
        assert codes == [0, 0, 0], output(run_dir, 0)[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["placement"] == {"trainer": [0, 1], "generators": [2]}

    one_host = run_app(tmp_path / "one_host", *common[:-1], "trainer.procs=2")
    assert one_host.returncode == 0, one_host.output[-3000:]
    across, single = read_metrics(run_dir), one_host.metrics
    assert [m["reward/mean"] for m in across] == [m["reward/mean"] for m in single]  # same samples
    for a, b in zip(across, single):
        assert a["train/loss"] == pytest.approx(b["train/loss"], abs=1e-6)
        assert a["train/grad_norm"] == pytest.approx(b["train/grad_norm"], rel=1e-5)


def test_a_generator_host_that_dies_stops_the_run_naming_it(tmp_path):
    run_dir = tmp_path / "run"
    with simulated_hosts(2) as cluster:
        procs = launch(cluster, run_dir, "steps=400", "placement.generator_hosts=[1]", nodes=2)
        wait_for_step(procs[0], run_dir, 10)
        killed_at = time.monotonic()
        cluster.kill_node(1)
        code = procs[0].wait(timeout=90)
        elapsed = time.monotonic() - killed_at
        text = output(run_dir, 0)
        assert code == 1, text[-3000:]
        assert elapsed < 60, f"took {elapsed:.0f}s to stop"
        # whichever of node 1's actors Monarch reports first: its generator or its weight relay
        assert ("generator 0" in text or "weight relay" in text) and "node 1" in text and "192.0.2.2" in text
        time.sleep(2)
        assert cluster.pids(0) == [] and cluster.pids(1) == []  # no orphans on either node
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "node 1" in summary["failure"] and summary["accounting_ok"]


def test_a_node_that_never_joins_fails_naming_it(tmp_path):
    with simulated_hosts(1) as cluster:
        start = time.monotonic()
        command = launch_command(3, 0, "apps.grpo", f"hydra.run.dir={tmp_path / 'run'}", join_timeout=5)
        node0 = cluster.start(0, command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        text, _ = node0.communicate(timeout=120)
        assert node0.returncode == 2, text
        assert "node rank(s) 1, 2 of 3 did not join" in text and "192.0.2.1:29400" in text
        assert time.monotonic() - start < 60


def test_four_hosts_with_lora_each_version_crosses_once_per_host(tmp_path):
    """Trainer on node 0, four generators on nodes 1-3 (two on node 1), LoRA: the adapters alone
    cross, once per node whatever its generators, to each node's relay."""
    run_dir = tmp_path / "run"
    overrides = ("steps=30", "generator.count=4", "placement.generator_hosts=[1,2,3]", "model.lora.rank=8")
    with simulated_hosts(4) as cluster:
        procs = launch(cluster, run_dir, *overrides, "checkpoint.every_steps=0", nodes=4)
        codes = wait_all(procs, timeout=600)
        assert codes == [0, 0, 0, 0], output(run_dir, 0)[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["placement"] == {"trainer": [0], "generators": [1, 2, 3, 1]} and summary["accounting_ok"]
    procs_file = json.loads((run_dir / "procs.json").read_text())
    assert [procs_file[f"weight_relay{n}"]["node"] for n in (1, 2, 3)] == [
        1,
        2,
        3,
    ] and "weight_relay0" not in procs_file
    assert len(summary["weight_receivers"]) == 3  # one per node: node 1's two generators share one
    for relay in summary["weight_receivers"]:
        assert relay["link_failures"] == 0 and relay["version"] >= 28, summary["weight_receivers"]
    full_model = sum(f.stat().st_size for f in (run_dir / "final_model").glob("*.safetensors"))
    assert all(m["weights/bytes"] < full_model / 4 for m in read_metrics(run_dir))  # adapters, not the model
    assert max(m["policy/age_max"] for m in read_metrics(run_dir)) <= 1


def test_a_link_that_goes_down_mid_run_is_reported_and_the_run_goes_on(tmp_path):
    """Node 1's link down for a few seconds: the version in flight fails within
    weights.link_timeout_s, the warning names node 1's relay, and once the link is back the
    newest version arrives over a fresh pair and the run ends as usual."""
    run_dir = tmp_path / "run"
    with simulated_hosts(2) as cluster:
        procs = launch(
            cluster, run_dir, "steps=400", "placement.generator_hosts=[1]", "weights.link_timeout_s=2", nodes=2
        )
        wait_for_step(procs[0], run_dir, 20)
        cluster.run(1, ["ip", "link", "set", "eth0", "down"])
        time.sleep(5)
        cluster.run(1, ["ip", "link", "set", "eth0", "up"])
        codes = wait_all(procs, timeout=400)
        text = output(run_dir, 0)
        assert codes == [0, 0], text[-3000:]
    assert (
        "warning: a version to the weight relay (pid" in text and "on node 1: node1, 192.0.2.2) did not arrive" in text
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    [relay] = summary["weight_receivers"]
    assert relay["link_failures"] >= 1 and relay["version"] >= 398, relay
    # Samples in flight across the outage may come back too old: dropped as stale and counted, never trained.
    assert summary["accounting_ok"] and summary["steps"] == 400 and summary["dropped_other"] == 0


def test_a_generator_host_that_dies_is_reported_the_run_goes_on_and_takes_it_back(tmp_path):
    """Trainer on node 0, generators on nodes 1 and 2; node 2 dies mid-run: within 60 s a line names
    the lost generator and its node, its rollout worker moves to node 1's generator. Node 2's
    launcher started again: its relay and generator are spawned there again, get the newest
    weights and generate again; the run ends (SIGTERM) with every sample accounted for."""
    run_dir = tmp_path / "run"
    overrides = ("steps=5000", "generator.count=2", "placement.generator_hosts=[1,2]", "checkpoint.every_steps=0")
    with simulated_hosts(3) as cluster:
        procs = launch(cluster, run_dir, *overrides, nodes=3)
        wait_for_step(procs[0], run_dir, 10)
        cluster.kill_node(2)
        killed_at = time.monotonic()
        while "the run goes on with generators [0]" not in output(run_dir, 0):
            assert time.monotonic() - killed_at < 60 and procs[0].poll() is None, output(run_dir, 0)[-3000:]
            time.sleep(0.5)
        back = start_node(cluster, run_dir, 2, *overrides, nodes=3, log="_again")
        deadline = time.monotonic() + 180
        while "node 2 taken back" not in output(run_dir, 0):
            assert time.monotonic() < deadline and procs[0].poll() is None, output(run_dir, 0)[-3000:]
            time.sleep(0.5)
        back_at = read_metrics(run_dir)[-1]["generator/1/samples"]
        wait_for_step(procs[0], run_dir, read_metrics(run_dir)[-1]["step"] + 40)
        while read_metrics(run_dir)[-1]["generator/1/samples"] <= back_at:  # until it has generated again
            assert time.monotonic() < deadline + 120 and procs[0].poll() is None, output(run_dir, 0)[-3000:]
            time.sleep(0.5)
        procs[0].send_signal(signal.SIGTERM)  # a clean stop: checkpoint, final model, summary
        codes = [procs[0].wait(timeout=120), procs[1].wait(timeout=60), back.wait(timeout=60)]
        assert codes == [128 + signal.SIGTERM, 0, 0], output(run_dir, 0)[-3000:]
    text = output(run_dir, 0)
    # whichever of node 2's actors Monarch reports first: the generator, or its node's relay (whose
    # generators are lost with it)
    assert "generator 1 (pid" in text and "on node 2: node2, 192.0.2.3)" in text
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["accounting_ok"] and summary["failure"] is None
    [lost] = summary["generators_lost"]
    assert lost.startswith("generator 1 (") and "node 2" in lost
    [taken_back] = summary["generators_taken_back"]
    assert taken_back["generator"] == 1 and "on node 2: node2, 192.0.2.3" in taken_back["proc"]
    assert summary["generator_samples"][1] > taken_back["samples_before"]  # it generated again
    relays = summary["weight_receivers"]
    assert [r["lost"] for r in relays] == [False, False] and relays[1]["taken_back"] == 1, relays
    assert min(r["version"] for r in relays) >= summary["steps"] - 2, relays
    rewards = [m["reward/mean"] for m in read_metrics(run_dir)]
    assert statistics.fmean(rewards[-10:]) > statistics.fmean(rewards[:10]) + 0.1, rewards  # still learning


def test_a_slow_link_skips_versions_without_holding_the_trainer(tmp_path):
    """Node 0's egress shaped to 10 Mbit/s (tc's token bucket): a version of the tiny model takes
    ~0.4 s to cross, several steps' worth. The relay skips to the newest each time (counted),
    generation on node 1 stays within max_policy_age, and the run ends as usual."""
    run_dir = tmp_path / "run"
    with simulated_hosts(2) as cluster:
        shaped = cluster.run(
            0, ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "10mbit", "burst", "16kb", "latency", "2s"]
        )
        assert shaped.returncode == 0, shaped.stderr  # iproute2's tc and the kernel's sch_tbf
        procs = launch(cluster, run_dir, "steps=60", "placement.generator_hosts=[1]", "max_policy_age=4", nodes=2)
        codes = wait_all(procs, timeout=400)
        assert codes == [0, 0], output(run_dir, 0)[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    [relay] = summary["weight_receivers"]
    assert relay["versions_skipped"] > 0 and relay["link_failures"] == 0, relay
    metrics = read_metrics(run_dir)
    assert max(m["policy/age_max"] for m in metrics) <= 4 and summary["accounting_ok"] and summary["steps"] == 60
    assert max(m["policy/age_max"] for m in metrics) >= 2  # generation used older versions: the link was slow
