"""Data parallelism (METHOD.md §5.4): two gloo processes feeding different losses end with a
bit-identical π, equal to one process fed the union of their losses."""

from __future__ import annotations

import socket

import torch
import torch.multiprocessing as mp

import _dist_worker as W


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_share_pi_equal_to_union(tmp_path):
    mp.spawn(W.worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    assert r0["world"] == r1["world"] == 2
    assert r0["probs"] is not None
    assert torch.equal(r0["probs"], r1["probs"]) and r0["hashes"] == r1["hashes"]  # bit-identical on both ranks
    torch.testing.assert_close(r0["m_hat"], r1["m_hat"], rtol=0, atol=0, equal_nan=True)

    # one process fed the union of both ranks' batches, step by step
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        union, alone = W.make_sampler(), W.make_sampler()
        for step in range(W.STEPS):
            for rank in (0, 1):
                levels, loss = W.batch(union, rank, step)
                union.update(levels, loss)
            levels, loss = W.batch(alone, 0, step)
            alone.update(levels, loss)
            union.step()
            alone.step()
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(union.probs, r0["probs"])
    torch.testing.assert_close(union.estimator.m_hat, r0["m_hat"], rtol=0, atol=0, equal_nan=True)
    # the statistics really were summed across ranks: rank 0's own losses alone give another π
    assert not torch.equal(alone.probs, r0["probs"])
