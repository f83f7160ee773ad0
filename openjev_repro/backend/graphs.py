"""CUDA Graph replay keyed by exact token length, with an LRU capacity (fast mode only).

One graph per distinct input length: capture copies the ids into a static buffer, runs the
forward twice on a side stream (allocator and autotuner warm-up), then records it. A later
request of the same length copies its ids into the buffer and replays. When more lengths than
`capacity` are seen, the least recently used graph is dropped (an eviction), so a mixed
workload with more distinct lengths than the capacity keeps recapturing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

__all__ = ["GraphCache"]


class GraphCache:
    def __init__(self, capacity: int, device: Any, compiled: bool = False):
        import torch

        if capacity < 1:
            raise ValueError("CUDA Graph capacity must be at least 1.")
        self.capacity = capacity
        self.compiled = compiled   # torch.compile'd forward: never compile while capturing (see _capture)
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()
        self._graphs: OrderedDict[int, tuple[Any, Any, Any]] = OrderedDict()
        self.captures = 0
        self.replays = 0
        self.evictions = 0

    def stats(self) -> dict[str, int]:
        return {"capacity": self.capacity, "retained": len(self._graphs), "captures": self.captures,
                "replays": self.replays, "evictions": self.evictions}

    def run(self, forward: Callable[[Any], Any], ids: Any) -> Any:
        """forward(static_ids) -> tensor; returns a copy of its output for `ids`."""
        length = int(ids.shape[-1])
        entry = self._graphs.get(length)
        if entry is None:
            entry = self._capture(forward, ids)
            self._graphs[length] = entry
            self.captures += 1
            while len(self._graphs) > self.capacity:
                self._graphs.popitem(last=False)
                self.evictions += 1
        else:
            self._graphs.move_to_end(length)
            self.replays += 1
        graph, static_ids, static_out = entry
        static_ids.copy_(ids)
        graph.replay()
        return static_out.clone()

    def _capture(self, forward: Callable[[Any], Any], ids: Any) -> tuple[Any, Any, Any]:
        import torch

        static_ids = ids.clone()
        stream = torch.cuda.Stream(device=self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                forward(static_ids)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # A compiled forward may want to recompile under capture (its guards see the capturing
        # stream), and compiling cannot run inside a capture: reuse what the warm-up compiled.
        stance = torch.compiler.set_stance("eager_on_recompile") if self.compiled else nullcontext()
        with stance, torch.cuda.graph(graph, pool=self.pool):
            static_out = forward(static_ids)
        return graph, static_ids, static_out
