"""A training loop in the pattern of diffusers' example scripts, launched on two processes by
tests/integration/test_multiprocess_checkpoints.py (``accelerate launch``; not a copy of any script).

What it keeps of their pattern: the sampler built by ``integration.infonoise_sampler`` and registered
with ``accelerator.register_for_checkpointing``; ``global_step += 1`` then ``sampler.step(global_step)``;
``accelerator.save_state(f"checkpoint-{global_step}")`` every ``--checkpointing_steps``, either on the
main process only (``--save_on main``: train_unconditional.py, train_text_to_image.py, the DreamBooth
LoRA scripts) or on every rank (``--save_on every``: the SD3 LoRA and SDXL scripts under DeepSpeed, the Flux2 LoRA
script under FSDP, and this package's scripts); ``accelerator.load_state`` on every rank to resume. accelerate runs
neither DeepSpeed nor FSDP on a CPU (FSDP is enabled on accelerator devices only; under DeepSpeed it counts one
process where DeepSpeed counts two), so ``--save_on every`` emulates their save: besides ``save_state`` on every rank,
a collective gather of the model's state inside it, as FSDP's full state dict and a ZeRO checkpoint make. The data
and noise of step k on rank r come from a generator seeded with (r, k), so an uninterrupted run and a resumed one
see the same batches.
Each rank writes ``rank{r}.json``: its π, m̂, step and draw counts and a hash of the model weights.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os

import torch
from accelerate import Accelerator
from diffusers import EDMEulerScheduler

from diffusers_infonoise import infonoise_sampler

DIM, BATCH = 8, 16


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--output_dir", required=True)
    p.add_argument("--max_train_steps", type=int, default=6)
    p.add_argument("--checkpointing_steps", type=int, default=3)
    p.add_argument("--save_on", choices=("main", "every"), default="main")
    p.add_argument("--resume_from_checkpoint", default=None)
    args = p.parse_args()

    accelerator = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(DIM + 1, 32), torch.nn.SiLU(), torch.nn.Linear(32, DIM))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    noise_scheduler = EDMEulerScheduler()
    sampler = infonoise_sampler(
        noise_scheduler,
        {"seed": 0, "max_train_steps": args.max_train_steps},
        accelerator=accelerator,
        num_bins=16,
        warmup_steps=4,
        refresh_every=2,
        min_count=2,
        mmse_cap="auto",
    )  # the data statistics (cap, gate) are merged across ranks too

    global_step = 0
    if args.resume_from_checkpoint:
        accelerator.load_state(args.resume_from_checkpoint)
        global_step = int(os.path.basename(args.resume_from_checkpoint.rstrip("/")).split("-")[1])
    rank = accelerator.process_index
    while global_step < args.max_train_steps:
        gen = torch.Generator().manual_seed(1000 * rank + global_step)
        x0 = torch.sign(torch.randn(BATCH, DIM, generator=gen))  # two-point data: the gate comes from its grid
        noise = torch.randn(BATCH, DIM, generator=gen)
        levels = sampler.sample(BATCH, device=accelerator.device)
        noisy = sampler.add_noise(x0, noise, levels)
        pred = model(torch.cat([noisy, levels.timesteps[:, None]], dim=1))  # the denoiser D
        per_sample = ((pred - x0) ** 2).mean(dim=1)
        loss = (sampler.objective.loss_weight(levels.sigmas, sigma_data=sampler.sigma_data).float() * per_sample).mean()
        accelerator.backward(loss)  # DDP's gradient all-reduce: a sampler collective must not meet it
        optimizer.step()
        optimizer.zero_grad()
        sampler.update(levels, per_sample.detach())
        global_step += 1
        sampler.step(global_step)
        if global_step % args.checkpointing_steps == 0 and (args.save_on == "every" or accelerator.is_main_process):
            if args.save_on == "every":  # the engines' sharded save: every rank sends its part of the model
                parts = [None] * accelerator.num_processes
                torch.distributed.all_gather_object(parts, {k: v.cpu() for k, v in accelerator.unwrap_model(model).state_dict().items()})
            accelerator.save_state(os.path.join(args.output_dir, f"checkpoint-{global_step}"))
    accelerator.wait_for_everyone()

    weights = accelerator.unwrap_model(model).state_dict()
    digest = hashlib.sha256(b"".join(weights[k].detach().cpu().numpy().tobytes() for k in sorted(weights))).hexdigest()
    with open(os.path.join(args.output_dir, f"rank{rank}.json"), "w") as f:
        json.dump(
            {
                "pi": sampler.probs.tolist() if sampler.probs is not None else None,
                "pi_moves": sampler.pi_moves,
                "m_hat": [None if v != v else v for v in sampler.estimator.m_hat.tolist()],
                "optimizer_step": sampler.optimizer_step,
                "num_draws": sampler.num_draws,
                "mmse_cap": sampler.estimator.mmse_cap,
                "min_gap": sampler.estimator.data_min_gap,
                "global_step": global_step,
                "weights": digest,
            },
            f,
        )
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
