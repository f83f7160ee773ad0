"""NUMA binding, for real: numactl binds a real process and /proc shows what applied.

Host shapes this machine lacks (two nodes, a GPU's PCI device) are small sysfs trees in tmp_path."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from openjev_repro.errors import HostError
from openjev_repro.host import docker_cpuset, effective_binding, numa_prefix, numa_summary, parse_cpulist, pci_numa_node
from openjev_repro.host.numa import format_cpulist, node_cpus

needs_numactl = pytest.mark.skipif(shutil.which("numactl") is None,
                                   reason="numactl is not installed (apt-get install numactl)")


def two_node_sys(root: Path) -> Path:
    """A sysfs tree of a two-node host: CPUs 0-15 on node 0, 16-31 on node 1, a GPU on node 1."""
    nodes = root / "devices/system/node"
    for n, cpus in ((0, "0-15"), (1, "16-31")):
        (nodes / f"node{n}").mkdir(parents=True)
        (nodes / f"node{n}/cpulist").write_text(cpus + "\n")
    (nodes / "online").write_text("0-1\n")
    gpu = root / "bus/pci/devices/0000:3a:00.0"
    gpu.mkdir(parents=True)
    (gpu / "numa_node").write_text("1\n")
    return root


@pytest.mark.parametrize("text,cpus", [("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]), ("5", [5]), ("0-1\n", [0, 1])])
def test_cpulists_round_trip(text, cpus):
    assert parse_cpulist(text) == cpus
    assert parse_cpulist(format_cpulist(cpus)) == cpus


def test_bad_cpulist():
    with pytest.raises(HostError, match="is not a CPU list"):
        parse_cpulist("0-x")


def test_pci_numa_node_from_the_driver_bus_id(tmp_path):
    root = two_node_sys(tmp_path)
    assert pci_numa_node("00000000:3A:00.0", root) == 1  # 8-digit domain, upper case, as NVML prints it
    assert pci_numa_node("00000000:99:00.0", root) is None


def test_pci_numa_node_minus_one_means_unknown(tmp_path):
    dev = tmp_path / "bus/pci/devices/0000:18:00.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("-1\n")
    assert pci_numa_node("00000000:18:00.0", tmp_path) is None


def test_this_hosts_summary_is_read_from_sysfs():
    summary = numa_summary()
    online = Path("/sys/devices/system/node/online")
    expected = parse_cpulist(online.read_text()) if online.exists() else [0]
    assert summary.nodes == expected and summary.single_node == (len(expected) == 1)
    assert summary.numactl == shutil.which("numactl")


def test_cpus_of_another_node_are_refused(tmp_path):
    root = two_node_sys(tmp_path)
    with pytest.raises(HostError, match=r"CPUs 16-17 are not on NUMA node 0 \(its CPUs are 0-15\)"):
        docker_cpuset(0, "14-17", root)


def test_a_missing_node_says_the_host_has_one_node(tmp_path):
    single = tmp_path / "devices/system/node/node0"
    single.mkdir(parents=True)
    (single / "cpulist").write_text("0-1\n")
    (tmp_path / "devices/system/node/online").write_text("0\n")
    with pytest.raises(HostError, match="NUMA node 1 does not exist on this host .* single NUMA node, 0"):
        docker_cpuset(1, None, tmp_path)


def test_docker_cpuset_defaults_to_the_nodes_cpus(tmp_path):
    root = two_node_sys(tmp_path)
    assert docker_cpuset(1, None, root) == {"cpuset_cpus": "16-31", "cpuset_mems": "1"}
    assert docker_cpuset(0, "0-15", root) == {"cpuset_cpus": "0-15", "cpuset_mems": "0"}
    assert node_cpus(1, root) == list(range(16, 32))


def test_numa_prefix_without_numactl_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no numactl on it: the real lookup fails
    with pytest.raises(HostError, match="numactl is not installed.*apt-get install numactl"):
        numa_prefix(0, "0")


@needs_numactl
def test_numactl_binding_really_applies():
    cpu = parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())[-1]
    prefix = numa_prefix(0, str(cpu))
    assert prefix[1:] == ["--membind=0", f"--physcpubind={cpu}"]
    proc = subprocess.Popen([*prefix, sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        for _ in range(100):  # numactl execs python in place; wait until the binding shows
            binding = effective_binding(proc.pid)
            if binding["cpus_allowed_list"] == str(cpu):
                break
            __import__("time").sleep(0.05)
        assert binding["pid"] == proc.pid and binding["cpus_allowed_list"] == str(cpu)
        assert 0 in parse_cpulist(binding["mems_allowed_list"])
        assert binding["memory_policy"] == "bind:0"  # --membind is a policy; it shows in numa_maps
    finally:
        proc.stdin.close()
        proc.wait(10)


def test_an_unbound_process_has_the_default_policy():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert effective_binding(proc.pid)["memory_policy"] in ("default", None)  # None: kernel without NUMA
    finally:
        proc.stdin.close()
        proc.wait(10)


def test_effective_binding_of_a_gone_process():
    proc = subprocess.Popen(["true"])
    proc.wait()
    with pytest.raises(HostError, match=f"Cannot read the binding of pid {proc.pid}"):
        effective_binding(proc.pid)
