"""Data parallelism (METHOD.md §5.4): two gloo processes feeding different losses end with a
bit-identical π, equal to one process fed the union of their losses (and data)."""

from __future__ import annotations

import pytest
import torch
import torch.multiprocessing as mp

from helpers import dist_worker as W
from helpers.launch import free_port


def test_two_processes_share_pi_equal_to_union(tmp_path):
    mp.spawn(W.worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
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
    # the data statistics too, by hand: the smallest gap within a batch is 2 on rank 0 (±1) and 1 on
    # rank 1 (±0.5), so 1 over both; the per-dimension variance is about (1 + 0.25)/2 = 0.625 (random
    # signs: the sample mean is not exactly 0). Rank 0 alone: gap 2, variance about 1.
    assert r0["cap"] == r1["cap"] == union.estimator.mmse_cap
    assert abs(r0["cap"] - 0.625) < 2e-3
    assert r0["min_gap"] == r1["min_gap"] == union.estimator.data_min_gap == 1.0
    assert abs(alone.estimator.mmse_cap - 1.0) < 3e-3 and alone.estimator.data_min_gap == 2.0


@pytest.mark.parametrize("target_space", ["phi", "reducible"])
def test_checkpoint_of_one_rank_resumes_every_rank_exactly(tmp_path, target_space):
    """What ``accelerator.register_for_checkpointing(sampler)`` relies on: accelerate writes the state of
    rank 0 only (and diffusers' scripts call ``save_state`` on rank 0 only), and every rank loads it. Target C
    (``reducible``) too: its fit, read from both ranks' merged windows, is in the checkpoint and decides the final π."""
    mp.spawn(W.resume_worker, args=(2, free_port(), str(tmp_path), target_space), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"resumed{r}.pt") for r in (0, 1))
    # the uninterrupted two-rank run of the same batches
    mp.spawn(W.worker, args=(2, free_port(), str(tmp_path), target_space), nprocs=2, join=True)
    ref = torch.load(tmp_path / "rank0.pt")
    assert torch.equal(r0["probs"], ref["probs"]) and torch.equal(r1["probs"], ref["probs"])
    # π's moves (stored schedules carry them) resume with it: the same steps and TVs, bit for bit, on both ranks
    assert r0["pi_moves"] == r1["pi_moves"] == ref["pi_moves"] and len(ref["pi_moves"]["tv"]) >= 2
    if target_space == "reducible":  # the fit was active at the end on both ranks (3 windows: steps 2, 4, 6)
        assert r0["fitted"] == r1["fitted"] and r0["fitted"] > 0
    # the saved open statistics are both ranks' (step 2's batch of 1024 on each: 2048 samples), merged at
    # the step on every rank alike, with nothing left unmerged
    assert float(r0["open_counts"].sum()) == 2 * W.BATCH
    assert float(r0["merged_counts"].sum()) == float(r1["merged_counts"].sum()) == 2 * W.BATCH
    assert torch.equal(r0["merged_counts"], r1["merged_counts"])
    assert float(r0["unmerged"].sum()) == float(r1["unmerged"].sum()) == 0
    # each rank's own stream draws other levels, and a resumed rank continues its own stream
    assert not torch.equal(r0["stream"][0], r1["stream"][0])
    assert not torch.equal(r0["stream"][0], r0["stream"][1])
    assert not torch.equal(r0["after"][0], r1["after"][0])
    assert torch.equal(r0["after"][0], r0["next"]) and torch.equal(r1["after"][0], r1["next"])


@pytest.mark.parametrize("shows_data", [True, False])
def test_a_profile_start_on_two_ranks_holds_one_pi(tmp_path, shows_data):
    """Issue 22: several processes split the stratified levels (the same number of forward passes on each, which
    DDP's forward may need) and hold the identical π afterwards, built from both ranks' errors. The cap V is the
    per-dimension variance of both ranks' 4 batches (by hand), whether the loss showed them (add_noise) or the start
    observed them itself (a loss that noises by hand, issue 28)."""
    mp.spawn(W.profile_worker, args=(2, free_port(), str(tmp_path), shows_data), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"profile{r}.pt") for r in (0, 1))
    assert r0["probs"] is not None and torch.equal(r0["probs"], r1["probs"])
    torch.testing.assert_close(r0["m_hat"], r1["m_hat"], rtol=0, atol=0, equal_nan=True)
    assert r0["info"]["forward_passes"] == r1["info"]["forward_passes"] == 4  # 32 bins x 4 levels / 2 ranks / 16
    assert r0["info"]["data"] == r1["info"]["data"] == ("loss_fn" if shows_data else "batches")
    gens = [torch.Generator().manual_seed(r) for r in (0, 1)]  # each rank's first 4 batches
    seen = torch.cat([0.5 * torch.randn(16, 3, generator=g, dtype=torch.float64) for g in gens for _ in range(4)])
    assert r0["cap"] == r1["cap"] == pytest.approx(float(seen.var(0, unbiased=False).mean()), rel=1e-12)
    # each bin's 4 levels alternate between the ranks along the stratified list (2 each): rank 0's errors are the
    # exact MMSE, rank 1's twice it, so m̂ = 1.5 x a mean of the MMSE inside the bin, between 1.5 x its values at the
    # bin's edges (the MMSE increases with sigma); one rank's errors alone would fall outside at large sigma
    import math

    edges = torch.exp(torch.linspace(math.log(0.002), math.log(80.0), 33, dtype=torch.float64))
    mmse = edges**2 * 0.25 / (edges**2 + 0.25)
    m = r0["m_hat"]
    assert bool((m >= 1.5 * mmse[:-1] * (1 - 1e-9)).all()) and bool((m <= 1.5 * mmse[1:] * (1 + 1e-9)).all())


@pytest.mark.parametrize("shows_data", [True, False])
def test_the_per_element_bound_of_a_profile_start_is_tallied_over_both_ranks(tmp_path, shows_data):
    """Issue 31: on ±1 data each rank tallies the values of its own 4 batches; the bound both apply comes from the
    counts of all 8 (by hand, ½ a count a value added), so both hold the same m̂ and π. Rank 0's errors are the
    N(0, 0.25) MMSE and rank 1's twice it (m̂ = 1.5 x their mean in a bin); the bound is the smaller at the clean end."""
    import math

    from helpers.reference import two_point_mmse_with_prior

    mp.spawn(W.profile_worker, args=(2, free_port(), str(tmp_path), shows_data, True), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"profile{r}.pt") for r in (0, 1))
    assert r0["probs"] is not None and torch.equal(r0["probs"], r1["probs"])
    torch.testing.assert_close(r0["m_hat"], r1["m_hat"], rtol=0, atol=0, equal_nan=True)
    assert r0["info"]["bound"] == r1["info"]["bound"]
    assert r0["info"]["bound"]["values"] == 2 and r0["info"]["bound"]["samples"] == 2 * 4 * 16
    seen = torch.cat([b for r in (0, 1) for b in W.profile_batches(r, True)[:4]])
    p = ((seen == 1).sum(0).double() + 0.5) / (len(seen) + 1.0)
    edges = torch.linspace(math.log(0.002), math.log(80.0), 33, dtype=torch.float64)
    centres = torch.exp(0.5 * (edges[1:] + edges[:-1]))
    m = r0["m_hat"]
    lowered = 0
    for k, c in enumerate(centres.tolist()):
        # the bound's mean over the bin (12-point midpoint rule in ln σ; the start's levels are spread across the bin)
        inner = [math.exp(float(edges[k] + (edges[k + 1] - edges[k]) * (j + 0.5) / 12)) for j in range(12)]
        bound = sum(two_point_mmse_with_prior(float(q), sig) for q in p for sig in inner) / (3 * 12)
        measured_low = 1.5 * math.exp(edges[k]) ** 2 * 0.25 / (math.exp(edges[k]) ** 2 + 0.25)  # below m̂ as measured
        if 0.1 < c and 1e-4 * c**2 < bound < measured_low:
            assert float(m[k]) == pytest.approx(bound, rel=1e-2)
            lowered += 1
    assert lowered >= 3


@pytest.mark.parametrize(
    "case,want",
    [
        ("agree", ([-1.0, 1.0], [[2.0, 1.0], [1.0, 2.0]])),  # both ranks' rows counted, by hand
        ("one rank sees nothing", ([-1.0, 1.0], [[1.0, 1.0], [0.0, 2.0]])),
        ("one rank on 18 values", "the data takes more than 16 values"),
        ("shapes differ", "its batches differ in shape"),
        ("18 values together", "the data takes more than 16 values"),
    ],
)
def test_the_value_tally_agrees_on_every_rank_when_the_ranks_data_disagree(tmp_path, case, want):
    """Issue 31: the tally's collective decides from rows every rank receives, so ranks whose data disagree (one sees
    nothing, one sees 17 values, shapes differ, 18 values only together) return the same thing, and none hangs."""
    mp.spawn(W.tally_worker, args=(2, free_port(), str(tmp_path), case), nprocs=2, join=True)
    r0, r1 = (torch.load(tmp_path / f"tally{r}.pt") for r in (0, 1))
    if isinstance(want, str):
        assert r0["resolved"] is None and r1["resolved"] is None and r0["refused"] == r1["refused"] == want
    else:
        for r in (r0, r1):
            values, counts = r["resolved"]
            assert values.tolist() == want[0] and counts.tolist() == want[1]


def test_the_package_logs_info_on_the_main_process_only(tmp_path):
    """Issue 28: the package's INFO lines (a profile start, each refresh of π) came once per rank, where diffusers logs
    on the main process only. Rank 0 logs them; rank 1 logs none; a warning, which may differ by rank, comes from both."""
    import json

    mp.spawn(W.logging_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    logs = [json.loads((tmp_path / f"log{r}.json").read_text()) for r in (0, 1)]
    infos = [[msg for level, name, msg in log if level == "INFO" and name.startswith("diffusers_infonoise")] for log in logs]
    assert any("profile start" in m for m in infos[0]) and sum("pi refreshed" in m for m in infos[0]) >= 2, infos[0]
    assert infos[1] == []
    for rank, log in enumerate(logs):
        assert ["WARNING", "diffusers_infonoise.sampler.adaptive", f"rank {rank}'s own warning"] in log


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_every_collective_takes_the_statistics_on_the_levels_device(monkeypatch, backend):
    """Issue 28: NCCL reduces CUDA tensors only, and a gloo test cannot tell a CPU tensor from one on the loss's
    device. Here one process plays both ranks of a fake process group: every collective the package calls (estimator
    merge, data-statistics merge and layout agreement, found by grep: all are ``all_reduce``) must get its tensors
    on the device of the levels and losses, without asking for the current CUDA device (the former rule under NCCL,
    which put every rank's statistics on cuda:0 unless ``torch.cuda.set_device`` was called). The fake reduce doubles
    a sum (rank 1 holds the same statistics), so the run must equal one process fed every batch twice.

    The levels here are on the CPU (this machine has no GPU): a tensor moved anywhere else fails the test."""
    dist = torch.distributed
    reference = W.make_sampler()  # before the fake process group: one process, every batch twice
    for step in range(W.STEPS):
        for _ in range(2):
            levels, loss = W.batch(reference, 0, step)
            reference.update(levels, loss)
        reference.step()

    device = torch.device("cpu")
    touched = []

    def fake(name):
        def collective(tensor, *args, op=None, **kwargs):
            for t in tensor if isinstance(tensor, (list, tuple)) else [tensor]:
                assert t.device == device, f"{name}: a tensor on {t.device}, while the levels and losses are on {device}"
            touched.append(name)
            if name == "all_reduce" and op in (None, dist.ReduceOp.SUM):
                tensor.mul_(2)

        return collective

    names = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast", "reduce", "gather", "scatter")
    for name in names:
        monkeypatch.setattr(dist, name, fake(name))
    for name, value in (("is_available", True), ("is_initialized", True), ("get_world_size", 2), ("get_rank", 0), ("get_backend", backend)):
        monkeypatch.setattr(dist, name, lambda *a, _v=value, **k: _v)

    def current_device():
        raise AssertionError("a collective asked for the current CUDA device instead of taking the levels' device")

    monkeypatch.setattr(torch.cuda, "current_device", current_device)
    sampler = W.make_sampler()
    for step in range(W.STEPS):
        levels, loss = W.batch(sampler, 0, step)
        assert levels.sigmas.device == device and loss.device == device
        sampler.update(levels, loss)
        sampler.step()
    # the estimator merges at every step; the data statistics agree on a layout, then merge until they freeze
    assert set(touched) == {"all_reduce"} and len(touched) >= W.STEPS + 3
    assert sampler.num_updates >= 2 and torch.equal(sampler.probs, reference.probs)
    torch.testing.assert_close(sampler.estimator.m_hat, reference.estimator.m_hat, rtol=0, atol=0, equal_nan=True)
    assert sampler.estimator.mmse_cap == reference.estimator.mmse_cap and sampler.estimator.data_min_gap == 2.0
