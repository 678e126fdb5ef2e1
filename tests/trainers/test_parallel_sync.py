"""The adapter moves to one rank in pieces: the other ranks never hold the whole of it.

``tests/helpers/parallel_sync.py`` (torchrun, gloo, the tiny DeepSeek-V3 with a rank-16
adapter) measures under ``torch.profiler`` the bytes each rank allocates while the
learner hands over its adapter (``state_dict()["adapter"]``: the checkpoint's adapter
and an engine's adapter file) and while it digests it. Rank 0, the writer, receives the whole
adapter, equal to the gathered one, and can take it in the engine's dtype; every other
rank allocates at most 1.5x its share of the adapter (adapter bytes / world size), where
gathering the whole adapter on every rank, as the sync did before, takes more.
"""

from __future__ import annotations

import json

import pytest
from test_parallel_plan import torchrun_rows


@pytest.mark.slow
@pytest.mark.parametrize("sizes", [{"ep": 2}, {"pp": 2}], ids=["ep2", "pp2"])
def test_a_sync_streams_the_adapter_to_the_writer_alone(tmp_path, sizes):
    rows = torchrun_rows("parallel_sync.py", json.dumps(sizes), 2, tmp_path)
    writer, *others = sorted(rows, key=lambda r: r["rank"])
    assert writer["equal"] and writer["received"] > 0
    assert writer["bf16"] == ["torch.bfloat16"]  # the engine's dtype on request
    assert {r["sha256"] for r in rows} == {writer["gathered_sha256"]}
    for r in others:
        share = r["adapter_bytes"] / len(rows)
        assert r["received"] == 0
        assert r["sync"] <= 1.5 * share, (r, share)
        assert r["digest"] <= 1.5 * share, (r, share)
        assert r["gather_all"] > 1.5 * share  # what every rank took before
