"""Shared by the end-to-end tests of ``training_scripts/train_unconditional.py`` (scripts/test_train_unconditional*.py,
scripts/test_finetune.py), loaded as a pytest plugin by conftest.py: the tiny UNets, the script imported as a module, a few-step
argument list, the saved schedule and sampler state of a run. The script is run in-process through
``main([...])`` on a tiny UNet (8x8, channels (8, 16), no attention) and 64 sklearn digits, for a handful of
optimizer steps; two-process runs go through ``accelerate launch`` in a subprocess."""

from __future__ import annotations

import copy
import json
import logging
import warnings
from pathlib import Path

import pytest
import torch

from diffusers_infonoise import sampler as S
from diffusers_infonoise.schedule_io import CONFIG_KEY, SAMPLER_STATE_JSON, SAMPLER_STATE_TENSORS

from helpers import ROOT
from helpers.scripts import load_training_script

SCRIPT = ROOT / "training_scripts" / "train_unconditional.py"

TINY_UNET = {
    "_class_name": "UNet2DModel",
    "sample_size": 8,
    "in_channels": 1,
    "out_channels": 1,
    "layers_per_block": 1,
    "block_out_channels": [8, 16],
    "norm_num_groups": 4,
    "down_block_types": ["DownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "UpBlock2D"],
}


@pytest.fixture(scope="module")
def script():
    return load_training_script("train_unconditional", "train_unconditional_under_test")


@pytest.fixture(scope="module")
def unet_config(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("unet") / "unet.json"
    path.write_text(json.dumps(TINY_UNET))
    return str(path)


def base_args(unet_config: str, output_dir, *extra) -> list[str]:
    """A few-step run on 64 digits at 8x8; ``extra`` overrides (argparse keeps the last value)."""
    return [
        "--model_config_name_or_path",
        unet_config,
        "--dataset_name",
        "digits",
        "--resolution",
        "8",
        "--max_train_samples",
        "64",
        "--train_batch_size",
        "8",
        "--eval_batch_size",
        "2",
        "--logger",
        "none",
        "--seed",
        "0",
        "--output_dir",
        str(output_dir),
        "--ddpm_num_inference_steps",
        "2",
        "--num_inference_steps",
        "2",
        "--lr_warmup_steps",
        "0",
        "--infonoise_num_bins",
        "16",
        "--infonoise_min_count",
        "1",
        "--infonoise_warmup_steps",
        "2",
        "--infonoise_refresh_every",
        "2",
        "--checkpointing_steps",
        "1000",
        *map(str, extra),
    ]


@pytest.fixture
def draws(monkeypatch):
    """Record every ``sampler.sample`` call: the optimizer step it was made at, the sampler state
    and generator state just before the draw, and the drawn timesteps."""
    calls = []
    original = S.TrainingTimestepSampler.sample

    def sample(self, batch_size, *, device=None, generator=None):
        entry = {
            "step": self.optimizer_step,
            "sampler": self,
            "state": copy.deepcopy(self.state_dict()),
            "generator": None if generator is None else generator.get_state().clone(),
        }
        levels = original(self, batch_size, device=device, generator=generator)
        entry["timesteps"] = levels.timesteps.clone()
        calls.append(entry)
        return levels

    monkeypatch.setattr(S.TrainingTimestepSampler, "sample", sample)
    return calls


def scheduler_payload(output_dir) -> dict | None:
    config = json.loads((Path(output_dir) / "scheduler" / "scheduler_config.json").read_text())
    return config.get(CONFIG_KEY)


def load_pipeline_quietly(output_dir):
    """``DiffusionPipeline.from_pretrained`` (trusting the EDM folders' loader, this package's own) with
    diffusers' log records routed to the root logger; returns the pipeline and every warning (log record
    or ``warnings.warn``) raised while loading."""
    import diffusers
    from diffusers.utils import logging as dlogging

    records = []

    class Grab(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Grab(level=logging.WARNING)
    root = logging.getLogger("diffusers")
    root.addHandler(handler)
    verbosity = dlogging.get_verbosity()
    dlogging.set_verbosity_warning()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pipe = diffusers.DiffusionPipeline.from_pretrained(str(output_dir), trust_remote_code=True)
    finally:
        root.removeHandler(handler)
        dlogging.set_verbosity(verbosity)
    return pipe, records + [str(w.message) for w in caught]


def flatten_state(state: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in state.items():
        if isinstance(value, dict):
            flat.update(flatten_state(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def saved_sampler_state(checkpoint: Path, rank: int = 0) -> dict:
    from safetensors.torch import load_file

    folder = checkpoint / "noise_sampler" / f"rank_{rank}"
    meta = json.loads((folder / SAMPLER_STATE_JSON).read_text())
    return {**load_file(str(folder / SAMPLER_STATE_TENSORS)), **meta["values"]}


def assert_same_state(live: dict, saved: dict) -> None:
    assert set(live) == set(saved)
    for key, value in live.items():
        if torch.is_tensor(value):
            torch.testing.assert_close(saved[key], value, rtol=0, atol=0, equal_nan=True, msg=key)
        else:
            assert saved[key] == value, key


TINY_UNET_1D = {
    "_class_name": "UNet1DModel",
    "sample_size": 16,
    "in_channels": 4,
    "out_channels": 4,
    "extra_in_channels": 0,
    "time_embedding_type": "positional",
    "use_timestep_embedding": True,
    "flip_sin_to_cos": False,
    "freq_shift": 1,
    "block_out_channels": [8, 16],
    "down_block_types": ["DownResnetBlock1D", "DownResnetBlock1D"],
    "up_block_types": ["UpResnetBlock1D"],
    "mid_block_type": "MidResTemporalBlock1D",
    "out_block_type": "OutConv1DBlock",
    "act_fn": "mish",
    "norm_num_groups": 4,
    "layers_per_block": 1,
}


@pytest.fixture(scope="module")
def dna_dataset(tmp_path_factory) -> tuple[str, list[str]]:
    """32 random 16-mers, half of them soft-masked (lower case, as in genome FASTA files)."""
    import datasets
    import numpy as np

    rng = np.random.default_rng(0)
    seqs = ["".join(rng.choice(list("ACGT"), 16)) for _ in range(32)]
    seqs = [s.lower() if i % 2 else s for i, s in enumerate(seqs)]
    path = tmp_path_factory.mktemp("dna") / "ds"
    datasets.Dataset.from_dict({"sequence": seqs, "id": list(range(32))}).save_to_disk(str(path))
    return str(path), seqs


def seq_args(config_path, dataset, out, *extra) -> list[str]:
    return [
        "--dataset_name",
        dataset,
        "--sequence_column",
        "sequence",
        "--model_config_name_or_path",
        str(config_path),
        "--diffusion",
        "edm",
        "--train_batch_size",
        "8",
        "--eval_batch_size",
        "3",
        "--logger",
        "none",
        "--seed",
        "0",
        "--output_dir",
        str(out),
        "--num_inference_steps",
        "2",
        "--lr_warmup_steps",
        "0",
        "--infonoise_num_bins",
        "16",
        "--infonoise_min_count",
        "1",
        "--infonoise_warmup_steps",
        "2",
        "--infonoise_refresh_every",
        "2",
        "--checkpointing_steps",
        "2",
        "--use_ema",
        *map(str, extra),
    ]
