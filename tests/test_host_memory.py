"""MemorySampler on a real thread; device memory comes from the FakeGpus test double (no driver here)."""

import json
import threading
import time

import pytest
from fake_gpus import FakeGpus

from openjev_repro.errors import EvidenceError
from openjev_repro.host import MemorySampler

UUID = "GPU-00000000-0000-0000-0000-000000000000"


class Rising:
    """Memory that the 'backend' allocates while a pass runs: a stand-in for a real workload."""

    def __init__(self) -> None:
        self.value = 1000
        self.lock = threading.Lock()

    def __call__(self) -> int:
        with self.lock:
            return self.value

    def set(self, value: int) -> None:
        with self.lock:
            self.value = value


def test_per_pass_max_sample_and_value_after_the_pass(tmp_path):
    gpus, memory = FakeGpus.h200(1), Rising()
    gpus.script_memory(UUID, memory)
    with MemorySampler(gpus, UUID, period_s=0.01) as sampler:
        sampler.begin("hf/short/measured-1")
        memory.set(50947)
        time.sleep(0.1)
        memory.set(50900)  # the pass ends lower than its highest sample
        sampler.end("hf/short/measured-1")
        memory.set(1000)
        sampler.mark("between passes")
        sampler.begin("hf/short/measured-2")
        memory.set(51089)
        sampler.end("hf/short/measured-2")
    first, second = sampler.passes()
    assert first.label == "hf/short/measured-1" and first.max_sample_mib == 50947
    assert first.after_mib == 50900 and first.samples >= 3 and first.note == "samples, not peaks"
    assert (second.max_sample_mib, second.after_mib) == (51089, 51089)
    summary = sampler.summary()
    assert summary.note == "samples, not peaks" and summary.max_sample_mib == 51089 and summary.errors == 0


def test_the_thread_samples_periodically_and_stops():
    gpus = FakeGpus.h200(1)
    started = time.monotonic()
    sampler = MemorySampler(gpus, UUID, period_s=0.02).start()
    deadline = time.monotonic() + 30  # on a loaded machine the thread may start late: wait for samples, not a time
    while sampler.summary().samples < 5:
        assert time.monotonic() < deadline, "the sampler took fewer than 5 samples in 30 s"
        time.sleep(0.01)
    sampler.stop()
    elapsed = time.monotonic() - started
    count = sampler.summary().samples
    assert 5 <= count <= elapsed / 0.02 + 2  # never faster than its period, however slow the machine
    time.sleep(0.1)  # five periods: a stopped sampler takes no more samples
    assert sampler.summary().samples == count


def test_a_failed_read_is_recorded_and_sampling_goes_on():
    gpus, calls = FakeGpus.h200(1), []

    def flaky() -> int:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("NVML call nvmlDeviceGetMemoryInfo failed (GPU is lost)")
        return 7

    gpus.script_memory(UUID, flaky)
    sampler = MemorySampler(gpus, UUID)
    assert [sampler.sample(), sampler.sample(), sampler.sample()] == [7, None, 7]
    assert sampler.summary().errors == 1


def test_memory_jsonl_has_a_header_and_every_event(tmp_path):
    sampler = MemorySampler(FakeGpus.h200(1), UUID, period_s=0.1)
    sampler.begin("p1")
    sampler.end("p1")
    path = tmp_path / "memory.jsonl"
    sampler.write(path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {"format_version": 1, "kind": "header", "uuid": UUID, "period_s": 0.1, "note": "samples, not peaks"}
    assert [e["kind"] for e in lines[1:]] == ["begin", "sample", "sample", "end"]
    assert all(isinstance(e["t_ns"], int) for e in lines[1:])
    with pytest.raises(EvidenceError, match="never overwritten"):
        sampler.write(path)
