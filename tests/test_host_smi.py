"""nvidia-smi fallback: the CSV parsers on recorded output (no driver runs here)."""

import pytest

from openjev_repro.errors import HostError
from openjev_repro.host.smi import parse_apps, parse_gpus

# Recorded on a one-H200 machine, driver 580.159.04: `nvidia-smi --query-gpu=index,uuid,name,
# memory.used,memory.total,pci.bus_id --format=csv,noheader,nounits`, idle, and
# `--query-compute-apps=gpu_uuid,pid,process_name,used_memory` while a ctypes CUDA process held 4 GiB.
RECORDED_GPUS = "0, GPU-f7740697-acc6-b04a-beb3-5d2a3eadb800, NVIDIA H200, 0, 143771, 00000000:00:06.0\n"
RECORDED_APPS = "GPU-f7740697-acc6-b04a-beb3-5d2a3eadb800, 429, /opt/torch/.venv/bin/python3, 4614\n"

# Written in the same format to cover a multi-GPU host shaped like the published one (GPU 2
# with the study's UUID and its archived name) and the [N/A] fields drivers print in containers.
GPUS_CSV = """\
0, GPU-1f0e6a52-4c1b-7d11-93a0-0b7c1d2e3f40, NVIDIA H200, 0, 143771, 00000000:18:00.0
1, GPU-2a1b3c4d-5e6f-7081-92a3-b4c5d6e7f801, NVIDIA H200, 4, 143771, 00000000:2A:00.0
2, GPU-cbf66259-f4ab-0ede-1811-82037dde5924, NVIDIA L20X, 50947, 143771, 00000000:3A:00.0
3, GPU-3b2c4d5e-6f70-8192-a3b4-c5d6e7f80912, NVIDIA H200, [N/A], 143771, 00000000:5D:00.0
"""

APPS_CSV = """\
GPU-cbf66259-f4ab-0ede-1811-82037dde5924, 48113, /usr/bin/python3, 50944
GPU-cbf66259-f4ab-0ede-1811-82037dde5924, 48190, omni-open-jev-native, [N/A]
GPU-2a1b3c4d-5e6f-7081-92a3-b4c5d6e7f801, 7001, python, 2
"""


def test_recorded_h200_output():
    (gpu,) = parse_gpus(RECORDED_GPUS)
    assert gpu.to_dict() == {"index": 0, "uuid": "GPU-f7740697-acc6-b04a-beb3-5d2a3eadb800", "name": "NVIDIA H200",
                             "memory_used_mib": 0, "memory_total_mib": 143771, "pci_bus_id": "00000000:00:06.0"}
    (proc,) = parse_apps(RECORDED_APPS)[gpu.uuid]
    assert (proc.pid, proc.name, proc.used_memory_mib) == (429, "/opt/torch/.venv/bin/python3", 4614)


def test_parse_gpus_reads_every_field():
    gpus = parse_gpus(GPUS_CSV)
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    g2 = gpus[2]
    assert (g2.uuid, g2.name, g2.memory_used_mib, g2.memory_total_mib, g2.pci_bus_id) == (
        "GPU-cbf66259-f4ab-0ede-1811-82037dde5924", "NVIDIA L20X", 50947, 143771, "00000000:3A:00.0")
    assert gpus[3].memory_used_mib == 0  # [N/A] is unknown, reported as 0 used


def test_parse_apps_groups_by_gpu_and_keeps_unknown_memory_unknown():
    apps = parse_apps(APPS_CSV)
    on_2 = apps["GPU-cbf66259-f4ab-0ede-1811-82037dde5924"]
    assert [(p.pid, p.name, p.used_memory_mib) for p in on_2] == [
        (48113, "/usr/bin/python3", 50944), (48190, "omni-open-jev-native", None)]
    assert [p.pid for p in apps["GPU-2a1b3c4d-5e6f-7081-92a3-b4c5d6e7f801"]] == [7001]


@pytest.mark.parametrize("text", ["", "\n", "No running processes found\n"])
def test_parse_apps_with_no_processes(text):
    assert parse_apps(text) == {}


def test_a_name_with_a_comma_is_quoted_by_csv():
    apps = parse_apps('GPU-x, 5, "python, worker", 10\n')
    assert apps["GPU-x"][0].name == "python, worker"


def test_unexpected_field_count_is_a_clear_error():
    with pytest.raises(HostError, match=r"3 fields where 6 were asked for \(line 1"):
        parse_gpus("0, GPU-x, NVIDIA H200\n")
