"""Array data for ``train_unconditional.py``: an image column of float arrays (``datasets.Array2D``/``Array3D``) is
trained on as stored, in the model's own units (rescaled, dequantized data, latents), with no mapping to [−1, 1]."""

from __future__ import annotations

import datasets
import numpy as np
import pytest
import torch

from diffusers_infonoise.training.datasets import DataConfig, unconditional_dataset

from helpers.unconditional import base_args, scheduler_payload


def _save_arrays(values: np.ndarray, folder) -> str:
    feature = datasets.Array3D(shape=values.shape[1:], dtype="float32")
    datasets.Dataset.from_dict({"image": list(values)}, features=datasets.Features({"image": feature})).save_to_disk(str(folder))
    return str(folder)


def _binary_times_four(n: int = 64) -> np.ndarray:
    """(n, 1, 8, 8) values in {−4, 4}: binarized data four times the usual scale."""
    return np.where(np.random.default_rng(0).random((n, 1, 8, 8)) < 0.3, 4.0, -4.0).astype(np.float32)


def test_arrays_are_the_training_x0_as_stored(tmp_path):
    values = _binary_times_four(16)
    values[0, 0, 0, 0] = 0.123456  # a value off any 8-bit grid survives
    folder = _save_arrays(values, tmp_path / "x4")
    dataset, collate, channels, length = unconditional_dataset(DataConfig(dataset_name=folder, resolution=8))
    assert (channels, length, len(dataset)) == (1, None, 16)
    batch = collate([dataset[i] for i in range(16)])
    assert batch.dtype == torch.float32 and batch.shape == (16, 1, 8, 8)
    torch.testing.assert_close(batch, torch.from_numpy(values), rtol=0, atol=0)


def test_bad_array_data_is_refused_naming_the_option(tmp_path):
    folder = _save_arrays(_binary_times_four(4), tmp_path / "x4")
    with pytest.raises(ValueError, match="--resolution 16: .*pass --resolution 8"):
        unconditional_dataset(DataConfig(dataset_name=folder, resolution=16))
    with pytest.raises(ValueError, match="--random_flip"):
        unconditional_dataset(DataConfig(dataset_name=folder, resolution=8, random_flip=True))
    bad = _binary_times_four(4)
    bad[1, 0, 2, 3] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        unconditional_dataset(DataConfig(dataset_name=_save_arrays(bad, tmp_path / "nan"), resolution=8))


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_the_script_trains_on_the_arrays_scale(script, unet_config, tmp_path):
    """Data in {−4, 4}: the sampler sees the gap of 8 between the values (the value-grid gate's pivot is a tenth
    of it, 0.8, where binarized data in {−1, 1} gives 0.2), i.e. the data was not mapped to [−1, 1]."""
    folder = _save_arrays(_binary_times_four(), tmp_path / "x4")
    out = tmp_path / "run"
    script.main(base_args(unet_config, out, "--dataset_name", folder, "--diffusion", "edm", "--noise_sampler", "infonoise",
                          "--max_train_steps", "4", "--max_train_samples", "64"))  # fmt: skip
    payload = scheduler_payload(out)
    assert payload["data"]["min_gap"] == pytest.approx(8.0)
    assert payload["gate"]["pivot"] == pytest.approx(0.8)


def test_the_infonoise_command_reads_arrays_as_training_does(tmp_path, capsys):
    """`infonoise profile` / `recommend --model --dataset` / `dataset-profile` read the x0 the script trains on: float
    arrays as stored. Before, values above 1.5 were taken for 8-bit pixels (x/127.5 - 1), so data in {-4, 4} became
    about -0.97 +- 0.03 and the profile described other data. Independent check: the optimal empirical denoiser is
    scale-equivariant (weights softmax(-|x - x_i|^2 / 2 sigma^2) are unchanged when x, x_i and sigma scale together),
    so the profile of 4·x0 is that of x0 moved by ln 4 in ln sigma: its rho-hat mode sits 4x higher in sigma."""
    import json

    from diffusers_infonoise.cli import main
    from diffusers_infonoise.cli.loading import _load_images

    values = _binary_times_four(64)
    values[0, 0, 0, 0] = 0.123456
    x4 = _save_arrays(values, tmp_path / "x4")
    x, _ = _load_images(x4, split="train", max_samples=None, seed=0, image_column="image")
    torch.testing.assert_close(x, torch.from_numpy(values), rtol=0, atol=0)
    training, collate, _, _ = unconditional_dataset(DataConfig(dataset_name=x4, resolution=8))
    torch.testing.assert_close(x, collate([training[i] for i in range(64)]), rtol=0, atol=0)

    values[0, 0, 0, 0] = 4.0
    x1 = _save_arrays(values / 4, tmp_path / "x1")
    modes = {}
    for name, folder in (("x1", x1), ("x4", x4)):
        # 33 levels over [4^-4, 4^4]: ln sigma steps of ln(4)/4, so 4x is 4 levels up
        argv = ["dataset-profile", "--dataset", folder, "--num-levels", "33", "--sigma-min", 4.0**-4, "--sigma-max", 4.0**4,
                "--num-noise-draws", "64", "--gate", "none", "--output", tmp_path / name, "--no-progress"]  # fmt: skip
        assert main([str(a) for a in argv]) == 0
        prof = json.loads((tmp_path / name / "dataset_profile.json").read_text())["profile"]
        modes[name] = int(np.argmax(prof["rho_hat"]))
        assert prof["meta"]["value_range"] == ([-4.0, 4.0] if name == "x4" else [-1.0, 1.0])
    assert modes["x4"] == modes["x1"] + 4
    assert "values in [-4, 4]" in capsys.readouterr().out
