"""Collective communication times: ring all-reduce, all-gather, all-to-all, point-to-point.

Each function returns seconds for one collective on a group of ``n`` consecutive ranks:
a bandwidth term (bytes over NVLink inside a node, over the inter-node fabric once the
group leaves the node, each at the stated efficiency) plus a fixed latency per
collective that grows with log2 of the group size. Tensor-parallel groups are the innermost ranks, so a group of up to
``gpus_per_node`` ranks stays on NVLink.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentgym.plan.hardware import Cluster
from agentgym.plan.settings import Efficiency


@dataclass(frozen=True)
class Links:
    """The links of one cluster at the stated efficiencies."""

    cluster: Cluster
    eff: Efficiency

    def _bw(self, spans: bool) -> float:
        if spans:
            return self.cluster.network_bytes_per_s * self.eff.network
        return self.cluster.nvlink_bytes_per_s * self.eff.nvlink

    def _lat(self, spans: bool, n: int = 2) -> float:
        """Fixed cost of one collective: a per-hop latency times the log2(n) rounds of a
        tree (or the steps a ring pipelines small messages through)."""
        base = self.eff.network_latency_us if spans else self.eff.nvlink_latency_us
        return base * 1e-6 * max(1.0, math.log2(n))

    def all_reduce(self, nbytes: float, n: int, *, spans: bool | None = None) -> float:
        """Ring all-reduce of ``nbytes`` (each rank's full tensor) over ``n`` ranks."""
        if n <= 1:
            return 0.0
        spans = self.cluster.spans_nodes(n) if spans is None else spans
        return 2 * (n - 1) / n * nbytes / self._bw(spans) + self._lat(spans, n)

    def all_gather(self, nbytes: float, n: int, *, spans: bool | None = None) -> float:
        """All-gather (or reduce-scatter) whose full result is ``nbytes``."""
        if n <= 1:
            return 0.0
        spans = self.cluster.spans_nodes(n) if spans is None else spans
        return (n - 1) / n * nbytes / self._bw(spans) + self._lat(spans, n)

    def all_to_all(self, nbytes_out: float, n: int) -> tuple[float, bool]:
        """All-to-all where each rank scatters ``nbytes_out`` evenly over ``n`` ranks.

        The share bound for peers in the same node goes over NVLink, the rest over the
        fabric, at the same time; returns (seconds, whether it left the node).
        """
        if n <= 1:
            return 0.0, False
        gpn = self.cluster.gpus_per_node
        local = min(n, gpn)
        near = (local - 1) / n * nbytes_out
        far = (n - local) / n * nbytes_out
        spans = far > 0
        t = max(near / self._bw(False), far / self._bw(True) if spans else 0.0)
        return t + self._lat(spans, n), spans

    def p2p(self, nbytes: float, *, spans: bool) -> float:
        """One send/receive of ``nbytes`` between neighbouring pipeline stages."""
        return nbytes / self._bw(spans) + self._lat(spans)

    def pcie(self, nbytes: float) -> float:
        """A host <-> GPU copy of ``nbytes`` per GPU."""
        return nbytes / (self.eff.pcie_gbps * 1e9)
