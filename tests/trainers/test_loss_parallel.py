"""Loss parallelism: log-probs and entropy of logits split over the vocabulary.

Two gloo processes hold a vocabulary-sharded DTensor of logits (11 ids over 2 ranks: 6
and 5, the uneven split of ``Shard``); the trainer's ``selected_logprobs`` and
``token_entropy`` on it must equal the same functions on the whole logits in one
process, and the gradient of the log-probs must too, with no rank holding the whole
``[B, T, V]`` tensor.
"""

from __future__ import annotations

import gc

import torch
import torch.multiprocessing as mp

from agentgym.trainers.algorithm import selected_logprobs, token_entropy


def _case() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(3, 4, 11, generator=g) * 3, torch.randint(0, 11, (3, 4), generator=g)


def _rank(rank: int, store_path: str) -> None:
    import torch.distributed as dist

    store = dist.FileStore(store_path, 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    ok = False
    try:
        _compare(rank)  # its DTensors, and the mesh groups they hold, go when it returns
        ok = True
    finally:
        # as agentgym.trainers.distributed.shutdown leaves a run: meet the peer first, then
        # free the groups (with their gloo threads) now, not at the interpreter's exit,
        # where a gloo thread aborts the process ("terminate called without an active
        # exception": this test failed so about one time in five)
        if ok:
            dist.barrier()
        dist.destroy_process_group()
        gc.collect()


def _compare(rank: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (2,))
    full, targets = _case()
    split = distribute_tensor(full, mesh, [Shard(-1)]).requires_grad_()
    assert split.to_local().shape[-1] == (6 if rank == 0 else 5)
    logp = selected_logprobs(split, targets, temperature=0.7)
    (logp * torch.arange(12.0).view(3, 4)).sum().backward()
    ref_in = full.clone().requires_grad_()
    ref = selected_logprobs(ref_in, targets, temperature=0.7)
    (ref * torch.arange(12.0).view(3, 4)).sum().backward()
    torch.testing.assert_close(logp, ref)
    torch.testing.assert_close(split.grad.full_tensor(), ref_in.grad)
    torch.testing.assert_close(token_entropy(split.detach()), token_entropy(full))


def test_split_vocabulary_logprobs_equal_the_whole(tmp_path):
    mp.start_processes(_rank, args=(str(tmp_path / "store"),), nprocs=2, start_method="spawn")
