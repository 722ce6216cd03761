"""Online vs offline InfoNoise schedules (the paper's Figure 5) on binarized MNIST.

1. Train with ``training_scripts/train_unconditional.py`` (EDM path, ``--noise_sampler infonoise``);
   the script records π at every refresh in ``schedule/history.jsonl``.
2. Offline π from the frozen final checkpoint (EMA weights): :func:`profile_from_model` on held-out
   images, on the online sampler's bin centres.
3. Offline π from the optimal empirical denoiser of a training subset: :func:`profile_from_dataset`.
4. Report total-variation distances between the online π and both offline ones (the offline ones get
   the same floor mixing with the base, so like is compared with like), and how fast the online π
   settles: the first refresh after which consecutive refreshes change it by less than 0.01 in TV.

Writes ``<output_dir>/online_vs_offline.json`` and ``.png``. Runs on CPU or GPU (accelerate picks).

    python -m benchmarks.online_vs_offline --max_train_steps 2000 --resolution 28
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

from benchmarks import RESULTS, training_script


def _tv(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(p / p.sum() - q / q.sum()).sum())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset_name", default="binarized_mnist")
    ap.add_argument("--resolution", type=int, default=28, help="28 keeps binarized pixels binary (no resampling).")
    ap.add_argument("--max_train_steps", type=int, default=2000)
    ap.add_argument("--train_batch_size", type=int, default=64)
    ap.add_argument("--refresh_every", type=int, default=50)
    ap.add_argument("--warmup_steps", type=int, default=500)
    ap.add_argument("--probe_size", type=int, default=512, help="held-out images for the checkpoint profile")
    ap.add_argument("--data_subset", type=int, default=10000, help="training images for the empirical denoiser")
    ap.add_argument("--noise_draws", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work_dir", default="/tmp/infonoise-online-vs-offline")
    ap.add_argument("--output_dir", default=str(RESULTS))
    args = ap.parse_args(argv)

    from diffusers import EDMEulerScheduler, UNet2DModel

    from diffusers_infonoise.data import load_builtin_arrays
    from diffusers_infonoise.diagnostics import profile_from_dataset, profile_from_model
    from diffusers_infonoise.schedule_io import read_schedule

    t0 = time.time()
    train_argv = [
        "--diffusion",
        "edm",
        "--noise_sampler",
        "infonoise",
        "--dataset_name",
        args.dataset_name,
        "--resolution",
        str(args.resolution),
        "--train_batch_size",
        str(args.train_batch_size),
        "--max_train_steps",
        str(args.max_train_steps),
        "--learning_rate",
        "5e-4",
        "--lr_warmup_steps",
        "100",
        "--use_ema",
        "--checkpointing_steps",
        "1000000",
        "--save_images_epochs",
        "1000",
        "--eval_batch_size",
        "16",
        "--infonoise_refresh_every",
        str(args.refresh_every),
        "--infonoise_warmup_steps",
        str(args.warmup_steps),
        "--seed",
        str(args.seed),
        "--logger",
        "none",
        "--output_dir",
        args.work_dir,
    ]
    if not os.path.exists(os.path.join(args.work_dir, "model_index.json")):
        training_script("train_unconditional").main(train_argv)
    train_seconds = time.time() - t0

    # -- online: π at every refresh ---------------------------------------------------------------
    with open(os.path.join(args.work_dir, "schedule", "history.jsonl")) as f:
        history = [json.loads(line) for line in f]
    steps = [h["step"] for h in history]
    probs = [np.asarray(h["probs"]) for h in history]
    consecutive = [_tv(probs[i], probs[i - 1]) for i in range(1, len(probs))]
    settle = next((steps[i] for i in range(1, len(probs)) if all(c < 0.01 for c in consecutive[i - 1 :])), None)

    scheduler = EDMEulerScheduler.from_pretrained(args.work_dir, subfolder="scheduler")
    payload = read_schedule(scheduler)
    edges = torch.tensor(payload["edges"], dtype=torch.float64)
    centres = 0.5 * (edges[1:] + edges[:-1])
    widths = (edges[1:] - edges[:-1]).numpy()
    online = np.asarray(payload["pi"])  # bin masses
    floor = payload["hyperparameters"]["floor"]
    from diffusers_infonoise import make_sampler

    base = make_sampler("infonoise", scheduler, use_stored_schedule=False, loss_weighting="edm").base_masses.numpy()

    def as_masses(density_per_log_sigma: torch.Tensor) -> np.ndarray:
        m = density_per_log_sigma.numpy() * widths
        m = m / m.sum()
        return (1 - floor) * m + floor * base  # the same floor mixing as the online π

    # -- offline: frozen checkpoint ---------------------------------------------------------------
    device = "cuda" if torch.cuda.is_available() else "cpu"
    unet = UNet2DModel.from_pretrained(args.work_dir, subfolder="unet").to(device).eval()
    test_x, _ = load_builtin_arrays(args.dataset_name, "test")
    rng = np.random.default_rng(args.seed)
    idx = rng.choice(len(test_x), size=min(args.probe_size, len(test_x)), replace=False)
    probe = _prepare(test_x[idx], args.resolution)
    gate = payload["hyperparameters"]["gate"]
    common = dict(
        gate=gate, gate_fallback=payload["hyperparameters"]["gate_fallback"], smoothing=1.0, loss_weighting="edm", prediction_type="sample"
    )
    prof_model = profile_from_model(
        unet,
        scheduler,
        probe,
        sigmas=torch.exp(centres),
        batch_size=256,
        num_noise_draws=4,
        generator=torch.Generator().manual_seed(args.seed),
        device=device,
        progress=False,
        **common,
    )

    # -- offline: optimal empirical denoiser -------------------------------------------------------
    train_x, _ = load_builtin_arrays(args.dataset_name, "train")
    sub = rng.choice(len(train_x), size=min(args.data_subset, len(train_x)), replace=False)
    data = _prepare(train_x[sub], args.resolution).flatten(1)
    prof_data = profile_from_dataset(
        data,
        sigmas=torch.exp(centres),
        num_noise_draws=args.noise_draws,
        generator=torch.Generator().manual_seed(args.seed),
        device=device,
        sigma_data=0.5,
        **common,
    )

    off_model, off_data = as_masses(prof_model.pi), as_masses(prof_data.pi)
    result = {
        "command": "python -m benchmarks.online_vs_offline " + " ".join(argv if argv is not None else sys.argv[1:]),
        "training_argv": train_argv,
        "seed": args.seed,
        "device": device,
        "train_seconds": round(train_seconds, 1),
        "refresh_steps": steps,
        "consecutive_tv": consecutive,
        "settle_step_tv_below_0.01": settle,
        "tv_online_vs_checkpoint": _tv(online, off_model),
        "tv_online_vs_empirical_denoiser": _tv(online, off_data),
        "tv_checkpoint_vs_empirical_denoiser": _tv(off_model, off_data),
        "gate": {"online": payload["gate"], "checkpoint": prof_model.gate.__dict__, "dataset": prof_data.gate.__dict__},
        "log_sigma_centres": centres.tolist(),
        "pi_online": online.tolist(),
        "pi_checkpoint": off_model.tolist(),
        "pi_empirical_denoiser": off_data.tolist(),
        "note": "The empirical-denoiser profile of a finite subset describes memorisation at small sigma "
        "(METHOD.md section 7); all three pi include the same floor mixing with the base.",
    }
    os.makedirs(args.output_dir, exist_ok=True)
    with open(os.path.join(args.output_dir, "online_vs_offline.json"), "w") as f:
        json.dump(result, f, indent=1)
    _plot(result, widths, os.path.join(args.output_dir, "online_vs_offline.png"))
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "settle_step_tv_below_0.01",
                    "tv_online_vs_checkpoint",
                    "tv_online_vs_empirical_denoiser",
                    "tv_checkpoint_vs_empirical_denoiser",
                )
            }
        )
    )


def _prepare(images: np.ndarray, resolution: int) -> torch.Tensor:
    """uint8 (N, H, W) → float32 (N, 1, r, r) in [−1, 1], resized like the training script does."""
    from PIL import Image

    from diffusers_infonoise.training import image_transform

    tf = image_transform(resolution, center_crop=True, channels=1)
    return torch.stack([tf(Image.fromarray(im)) for im in images])


def _plot(result, widths, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.asarray(result["log_sigma_centres"])
    fig, (a, b) = plt.subplots(2, 1, figsize=(7, 6.5))
    for key, label in (
        ("pi_online", "online (end of training)"),
        ("pi_checkpoint", "offline: frozen checkpoint"),
        ("pi_empirical_denoiser", "offline: empirical denoiser"),
    ):
        a.step(x, np.asarray(result[key]) / widths, where="mid", label=label)
    a.set_xlabel("log σ (VE)")
    a.set_ylabel("π per unit log σ")
    a.legend(fontsize=8)
    a.set_title(
        f"TV online–checkpoint {result['tv_online_vs_checkpoint']:.3f}, online–empirical {result['tv_online_vs_empirical_denoiser']:.3f}",
        fontsize=9,
    )
    b.plot(result["refresh_steps"][1:], result["consecutive_tv"], marker=".")
    b.axhline(0.01, color="grey", ls=":")
    b.set_yscale("log")
    b.set_xlabel("optimizer step")
    b.set_ylabel("TV between consecutive refreshes")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
