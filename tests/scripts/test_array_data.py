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


def _save_images(images: list, folder) -> str:
    datasets.Dataset.from_dict({"image": images}, features=datasets.Features({"image": datasets.Image()})).save_to_disk(str(folder))
    return str(folder)


def test_pixels_of_every_depth_are_read_alike_by_training_and_the_profiles(tmp_path):
    """One conversion of pixels to x0 for training and `infonoise dataset-profile`: a uint8 array column was trained at
    0..255 as stored; 16-bit images were clipped to 8 bits in training (variance 0.004) and read unclipped, at up to
    512.95, by the profile. Now uint8 arrays are scaled as 8-bit images, 16-bit images by 65535, both readers alike."""
    from diffusers_infonoise.cli.loading import _load_images

    rng = np.random.default_rng(0)
    u8 = rng.integers(0, 256, (8, 1, 8, 8)).astype(np.uint8)
    u8[0, 0, 0, :2] = (0, 255)
    feature = datasets.Array3D(shape=(1, 8, 8), dtype="uint8")
    u8_folder = tmp_path / "u8"
    datasets.Dataset.from_dict({"image": list(u8)}, features=datasets.Features({"image": feature})).save_to_disk(str(u8_folder))
    deep = rng.integers(0, 65536, (8, 8, 8)).astype(np.uint16)
    deep[0, 0, :2] = (0, 65535)
    from PIL import Image

    cases = {
        str(u8_folder): u8.astype(np.float64) / 127.5 - 1.0,
        _save_images([Image.fromarray(a) for a in deep], tmp_path / "i16"): deep[:, None].astype(np.float64) / 32767.5 - 1.0,
    }
    for folder, want in cases.items():
        training, collate, channels, _ = unconditional_dataset(DataConfig(dataset_name=folder, resolution=8, center_crop=True))
        trained = collate([training[i] for i in range(8)]) if collate else torch.stack([training[i] for i in range(8)])
        profiled, _ = _load_images(folder, split="train", max_samples=None, seed=0, image_column="image")
        assert channels == 1 and (float(trained.min()), float(trained.max())) == (-1.0, 1.0)
        np.testing.assert_allclose(trained.double().numpy(), want, rtol=0, atol=1e-6)
        torch.testing.assert_close(profiled, trained, rtol=0, atol=0)
        assert float(trained.var()) > 0.25  # uniform pixels: 1/3 in [-1, 1] (clipped 16-bit data had 0.004)


def test_data_training_cannot_read_is_refused_naming_the_option(tmp_path):
    """Float images (no pixel range), arrays of other integers, an image column of strings and an empty data set: a
    clear ValueError led by the option (the scripts make it one line), not an AttributeError, IndexError or data
    silently clipped to 8 bits (float images in [0, 1] trained as all -1)."""
    from PIL import Image

    from diffusers_infonoise.cli.loading import CLIError, _load_images

    floats = _save_images([Image.fromarray(np.full((8, 8), 0.5, np.float32))] * 4, tmp_path / "f")
    ints = tmp_path / "i32"
    features = datasets.Features({"image": datasets.Array2D(shape=(8, 8), dtype="int32")})
    datasets.Dataset.from_dict({"image": [np.zeros((8, 8), np.int32)] * 4}, features=features).save_to_disk(str(ints))
    strings = tmp_path / "s"
    datasets.Dataset.from_dict({"image": ["a.png"] * 4}).save_to_disk(str(strings))
    empty = _save_images([], tmp_path / "empty")
    cases = {
        floats: r"^--image_column 'image': example 0: a float image \(PIL mode 'F'\) has no pixel range",
        str(ints): r"^--image_column 'image': arrays of int32; accepted: float arrays .* or uint8/uint16 pixels",
        str(strings): r"^--image_column 'image': holds str values such as 'a.png', not images .*cast_column",
        empty: r"^--dataset_name: .*empty holds no examples",
    }
    for folder, says in cases.items():
        with pytest.raises(ValueError, match=says):
            unconditional_dataset(DataConfig(dataset_name=folder, resolution=8))
        with pytest.raises(CLIError, match=says.replace("--image_column", "--image-column").replace("--dataset_name", "--dataset")):
            _load_images(folder, split="train", max_samples=None, seed=0, image_column="image")


@pytest.mark.usefixtures("fresh_accelerate_state")
def test_data_too_large_for_float32_stops_the_run_naming_its_scale(script, unet_config, tmp_path):
    """Arrays of magnitude 1e30 (trained as stored) overflow the loss: the run stops, and the causes it names include
    the data's scale."""
    folder = _save_arrays(_binary_times_four(16) * np.float32(2.5e29), tmp_path / "huge")
    argv = base_args(unet_config, tmp_path / "run", "--dataset_name", folder, "--diffusion", "edm", "--noise_sampler", "edm_lognormal",
                     "--max_train_steps", "4", "--max_train_samples", "16")  # fmt: skip
    with pytest.raises(RuntimeError, match=r"in a row had a non-finite loss.*training data of a scale whose squares overflow float32"):
        script.main(argv)
