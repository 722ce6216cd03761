"""Worker of tests/integration/test_distributed.py: kept light (torch + diffusers_infonoise only) so that the
spawned processes start quickly."""

from __future__ import annotations

import os

import torch

from diffusers_infonoise import InfoNoiseTrainingTimestepSampler
from diffusers_infonoise.paths import VEPath
from diffusers_infonoise.training.monitor import pi_hash

STEPS = 6
BATCH = 1024


def make_sampler(target_space: str = "phi"):
    path = VEPath("ve", 0.002, 80.0, sigma_data=0.5)  # EDMEulerScheduler's defaults
    # the m̂ cap and the gate come from the data each rank sees (reduced over ranks at refreshes)
    return InfoNoiseTrainingTimestepSampler(
        path,
        prediction_type="sample",
        loss_weighting="edm",
        num_bins=32,
        warmup_steps=2,
        refresh_every=2,
        min_count=4,
        mmse_cap="auto",
        gate="auto",
        target_space=target_space,
    )


def batch(sampler, rank: int, step: int):
    """Rank- and step-specific draws and losses. Losses are multiples of 2⁻²⁰ below 4, so every
    float64 sum of them is exact and independent of the summation order."""
    gen = torch.Generator().manual_seed(1000 * rank + step)
    levels = sampler.sample(BATCH, generator=gen)
    sig = levels.sigmas.double()
    m = (1.0 + rank) * sig**2 / (sig**2 + 0.25) * (1.0 + 0.5 * torch.sin(3.0 * torch.log(sig) + rank))
    # clean data noised through the sampler: ±1 on rank 0, ±0.5 on rank 1 (exact float sums)
    x0 = 0.5 * (2.0 - rank) * torch.sign(torch.randn(BATCH, 3, generator=gen, dtype=torch.float64))
    sampler.add_noise(x0, torch.zeros_like(x0), levels)
    return levels, torch.round(m * 2**20) / 2**20


def worker(rank: int, world: int, port: int, outdir: str, target_space: str = "phi"):
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        sampler = make_sampler(target_space)
        hashes = []
        for step in range(STEPS):
            levels, loss = batch(sampler, rank, step)
            sampler.update(levels, loss)
            sampler.step()
            hashes.append(pi_hash(sampler))
        torch.save(
            {
                "probs": sampler.probs,
                "pi_moves": sampler.pi_moves,
                "m_hat": sampler.estimator.m_hat,
                "hashes": hashes,
                "cap": sampler.estimator.mmse_cap,
                "min_gap": sampler.estimator.data_min_gap,
                "world": torch.distributed.get_world_size(),
            },
            os.path.join(outdir, f"rank{rank}.pt"),
        )
    finally:
        torch.distributed.destroy_process_group()


def resume_worker(rank: int, world: int, port: int, outdir: str, target_space: str = "phi"):
    """Steps 0-2, a checkpoint of the sampler written by rank 0 alone (``state_dict`` makes no collective
    call: diffusers' scripts call ``save_state`` on the main process only), then steps 3-5 on fresh
    samplers that all load it. Also records two draws of each rank's own stream."""
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        sampler = make_sampler(target_space).manual_seed(7)
        for step in range(3):
            levels, loss = batch(sampler, rank, step)
            sampler.update(levels, loss)
            sampler.step()
        stream = [sampler.sample(16).sigmas for _ in range(2)]
        path = os.path.join(outdir, "checkpoint.pt")
        state = sampler.state_dict() if rank == 0 else None  # rank 0 alone: no collective call may hang here
        if rank == 0:
            torch.save(state, path)
        torch.distributed.barrier()
        resumed = make_sampler(target_space)
        resumed.load_state_dict(torch.load(path, weights_only=False))
        after = [resumed.sample(16).sigmas]
        for step in range(3, STEPS):
            levels, loss = batch(resumed, rank, step)
            resumed.update(levels, loss)
            resumed.step()
        torch.save(
            {
                "probs": resumed.probs,
                "pi_moves": resumed.pi_moves,
                "stream": stream,
                "after": after,
                "next": sampler.sample(16).sigmas,
                "open_counts": None if state is None else state["estimator"]["counts"],
                "merged_counts": sampler.estimator.merged_counts.clone(),
                "unmerged": sampler.estimator.counts.clone(),
                # target C's fitted groups at the end (target_space="reducible"), None for other targets
                "fitted": None if resumed.reducibility is None else int((~torch.isnan(resumed.reducibility.exponents())).sum()),
            },
            os.path.join(outdir, f"resumed{rank}.pt"),
        )
    finally:
        torch.distributed.destroy_process_group()


def profile_batches(rank: int, binary: bool) -> list[torch.Tensor]:
    """Rank ``rank``'s batches of :func:`profile_worker`: N(0, 0.25) data, or ±1 data with P(+1) = 0.2, 0.7, 0.5 for
    the three elements (``binary``)."""
    gen = torch.Generator().manual_seed(rank)
    if binary:
        p = torch.tensor([0.2, 0.7, 0.5], dtype=torch.float64)
        return [torch.where(torch.rand(16, 3, generator=gen, dtype=torch.float64) < p, 1.0, -1.0) for _ in range(8)]
    return [0.5 * torch.randn(16, 3, generator=gen, dtype=torch.float64) for _ in range(8)]


def profile_worker(rank: int, world: int, port: int, outdir: str, shows_data: bool = True, binary: bool = False):
    """A ``"profile"`` start on two ranks whose models differ (rank r's errors are (1 + r) times the exact MMSE of
    N(0, 0.25) data): each measures its share of the stratified levels, and both end on the same π. ``shows_data``
    False: the loss noises by hand, so the start observes the (tensor) batches itself (issue 28). ``binary``: the
    batches are ±1 (:func:`profile_batches`), so that the per-element bound (tallied over both ranks) applies."""
    from diffusers_infonoise.sampler import start_from_model

    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        path = VEPath("ve", 0.002, 80.0, sigma_data=0.5)
        sampler = InfoNoiseTrainingTimestepSampler(
            path, prediction_type="sample", loss_weighting="edm", num_bins=32, min_count=4, mmse_cap="auto", gate="auto"
        )
        batches = profile_batches(rank, binary)

        def loss_fn(x0, levels):
            if shows_data:
                sampler.add_noise(x0, torch.zeros_like(x0), levels)
            sig = levels.sigmas.double()
            return (1.0 + rank) * sig**2 * 0.25 / (sig**2 + 0.25)

        info = start_from_model(sampler, loss_fn, batches, data_bound=binary, progress=False)
        torch.save(
            {"probs": sampler.probs, "m_hat": sampler.estimator.m_hat, "info": info, "cap": sampler.estimator.mmse_cap},
            os.path.join(outdir, f"profile{rank}.pt"),
        )
    finally:
        torch.distributed.destroy_process_group()


#: per case, each rank's batches of :func:`tally_worker` (rank 0's, rank 1's): ranks that disagree about the data
TALLY_CASES = {
    "agree": (torch.tensor([[-1.0, 1.0], [1.0, 1.0]]), torch.tensor([[-1.0, -1.0]])),
    "one rank sees nothing": (torch.tensor([[-1.0, 1.0], [1.0, 1.0]]), None),
    "one rank on 18 values": (torch.tensor([[-1.0, 1.0]]), torch.linspace(0, 1, 18).reshape(9, 2)),
    "shapes differ": (torch.ones(2, 2), torch.ones(2, 1, 2)),
    "18 values together": (torch.arange(10.0).reshape(5, 2), torch.arange(10.0, 18.0).reshape(4, 2)),
}


def tally_worker(rank: int, world: int, port: int, outdir: str, case: str):
    """``ValueTally.resolve`` on two ranks whose data disagree (:data:`TALLY_CASES`): every rank must return the same,
    and none may wait on a collective the other skipped (the test's spawn would hang)."""
    from diffusers_infonoise.data_statistics import ValueTally

    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        tally = ValueTally()
        x = TALLY_CASES[case][rank]
        if x is not None:
            tally.observe(x.double())
        resolved = tally.resolve()
        torch.save({"resolved": resolved, "refused": tally.refused}, os.path.join(outdir, f"tally{rank}.pt"))
    finally:
        torch.distributed.destroy_process_group()


def logging_worker(rank: int, world: int, port: int, outdir: str):
    """What the package logs on each rank through a run of steps with refreshes and a profile start: every record
    of a ``diffusers_infonoise`` logger reaching the root handler, and one warning of this rank's own."""
    import json
    import logging

    from diffusers_infonoise.sampler import start_from_model

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append([record.levelname, record.name, record.getMessage()])

    logging.getLogger().addHandler(Keep())
    logging.getLogger().setLevel(logging.INFO)
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        sampler = make_sampler()
        start_from_model(sampler, lambda x0, levels: levels.sigmas.double() ** 2 / (levels.sigmas.double() ** 2 + 1), [torch.zeros(64, 3)])
        for step in range(STEPS):
            levels, loss = batch(sampler, rank, step)
            sampler.update(levels, loss)
            sampler.step()
        logging.getLogger("diffusers_infonoise.sampler.adaptive").warning(f"rank {rank}'s own warning")
        with open(os.path.join(outdir, f"log{rank}.json"), "w") as f:
            json.dump(records, f)
    finally:
        torch.distributed.destroy_process_group()
