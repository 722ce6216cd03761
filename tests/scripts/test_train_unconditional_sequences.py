"""``train_unconditional.py`` on sequences (the 1-D path): one-hot DNA, UNet1DModel, FASTA samples."""

from __future__ import annotations

import json

import pytest
import torch

from helpers.scripts import assert_option_error
from helpers.unconditional import (
    TINY_UNET_1D,
    scheduler_payload,
    seq_args,
)

pytestmark = pytest.mark.slow


def test_sequences_train_a_1d_unet_resume_and_write_fasta(script, dna_dataset, tmp_path, draws):
    from diffusers import UNet1DModel

    dataset, _ = dna_dataset
    cfg = tmp_path / "unet1d.json"
    cfg.write_text(json.dumps(TINY_UNET_1D))
    out = tmp_path / "dna"
    script.main(seq_args(cfg, dataset, out, "--max_train_steps", 4))
    assert [c["step"] for c in draws] == [0, 1, 2, 3]

    config = json.loads((out / "unet" / "config.json").read_text())
    assert config["_class_name"] == "UNet1DModel" and config["in_channels"] == 4
    assert json.loads((out / "checkpoint-2" / "unet_ema" / "config.json").read_text())["_class_name"] == "UNet1DModel"
    assert scheduler_payload(out)["adapted"] is True
    lines = (out / "samples.fa").read_text().splitlines()
    assert lines[0::2] == [">sample_0", ">sample_1", ">sample_2"]
    assert all(len(s) == 16 and set(s) <= set("ACGT") for s in lines[1::2])
    assert not (out / "samples.png").exists()
    card = (out / "README.md").read_text()
    assert "sequences of length 16 over `ACGT`" in card and 'decode_sequences(samples, "ACGT")' in card
    assert "- sequence-generation" in card and "unconditional-image-generation" not in card

    # resume from checkpoint-2: the 1-D model and its EMA load back through the hooks
    import shutil

    shutil.rmtree(out / "checkpoint-4")
    draws.clear()
    script.main(seq_args(cfg, dataset, out, "--max_train_steps", 4, "--resume_from_checkpoint", "latest"))
    assert [c["step"] for c in draws] == [2, 3]
    model = UNet1DModel.from_pretrained(str(out / "unet"))
    x = torch.zeros(2, 4, 16)
    assert model(x, torch.tensor([1.0, 2.0])).sample.shape == (2, 4, 16)


def test_sequences_default_1d_unet_and_errors(script, dna_dataset, tmp_path, unet_config, capsys):
    from diffusers import UNet1DModel

    dataset, _ = dna_dataset
    args = script.parse_args(["--dataset_name", dataset, "--sequence_column", "sequence"])
    model = script.build_unet(args, 4, 16)
    assert isinstance(model, UNet1DModel) and model.config.sample_size == 16
    # the default 1-D UNet is conditioned on the noise level (its time embedding reaches the output)
    x = torch.randn(2, 4, 16)
    with torch.no_grad():
        assert not torch.allclose(model(x, torch.tensor([1.0, 1.0])).sample, model(x, torch.tensor([300.0, 300.0])).sample)

    fits = tmp_path / "unet1d.json"  # a config that fits, where the error is another option's
    fits.write_text(json.dumps(TINY_UNET_1D))
    # each is one line naming the option, as argparse's errors (exit status 2), not a traceback
    argv = seq_args(fits, dataset, tmp_path / "a", "--sequence_column", "seq", "--max_train_steps", 1)
    assert_option_error(capsys, "--sequence_column: 'seq' is not a column", script.main, argv)
    argv = seq_args(unet_config, dataset, tmp_path / "b", "--max_train_steps", 1)
    assert_option_error(capsys, "--model_config_name_or_path: a UNet2DModel config", script.main, argv)
    # a 1-D config that does not fit the data: named before torch fails on a shape
    cfg = tmp_path / "unet1d_len12.json"
    cfg.write_text(json.dumps({**TINY_UNET_1D, "sample_size": 12, "in_channels": 5}))
    says = r"in/out_channels 5/4, but --alphabet has 4 letters; sample_size 12, but the sequences have length 16"
    assert_option_error(capsys, says, script.main, seq_args(cfg, dataset, tmp_path / "c", "--max_train_steps", 1))
    # the default 1-D UNet for an odd length: no downsampling, still trains shapes through
    assert len(script.build_unet(args, 4, 33).config.block_out_channels) == 1
    assert len(script.build_unet(args, 4, 10).config.block_out_channels) == 2
    with pytest.raises(SystemExit):
        script.parse_args(["--sequence_column", "sequence"])  # no --dataset_name: argparse error
    argv = seq_args(fits, dataset, tmp_path / "d", "--max_train_samples", 4, "--max_train_steps", 1)
    assert_option_error(capsys, r"--train_batch_size 8 is larger than the data set \(4 examples", script.main, argv)
