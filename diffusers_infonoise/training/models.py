"""The denoisers ``train_unconditional.py`` builds: a pretrained one, one of a given config or its default UNets
for images and one-hot sequences, and the check that a model fits the data."""

from __future__ import annotations

import math

__all__ = ["default_unet", "check_unet_config", "unconditional_model", "local_model_config"]

#: what ``--model_config_name_or_path`` accepts, said in its errors
MODEL_CONFIG_ACCEPTED = "a UNet config, as a JSON file (a model's config.json) or a folder that holds one as config.json"


def unconditional_model(cls, cfg, *, channels: int, length: int | None = None):
    """The denoiser of class ``cls`` (``UNet2DModel`` for images, ``UNet1DModel`` for sequences of ``length``) for
    ``channels``-channel data: the ``unet/`` of ``cfg.pretrained_model_name_or_path`` (fine-tuning, at
    ``cfg.revision``), a new one of ``cfg.model_config_name_or_path``, else :func:`default_unet`; each checked against
    the data (:func:`check_unet_config`, ``cfg.resolution`` for images).

    Raises:
        ValueError: a model that does not fit the data, or a config of another model class, naming the option.
    """
    if cfg.pretrained_model_name_or_path:
        model = cls.from_pretrained(cfg.pretrained_model_name_or_path, subfolder="unet", revision=cfg.revision)
        check_unet_config(
            model.config, channels=channels, length=length, resolution=cfg.resolution, option="--pretrained_model_name_or_path"
        )
        return model
    if cfg.model_config_name_or_path:
        config = local_model_config(cfg.model_config_name_or_path)
        if config is None:  # a Hub repo id
            config = cls.load_config(cfg.model_config_name_or_path)
        if config.get("_class_name", cls.__name__) != cls.__name__:
            raise ValueError(
                f"--model_config_name_or_path: a {config['_class_name']} config; this data needs a "
                f"{cls.__name__} config ({'--sequence_column given' if length else 'images'})"
            )
        model = cls.from_config(config)
        check_unet_config(model.config, channels=channels, length=length, resolution=cfg.resolution)
        return model
    model = default_unet(channels, resolution=cfg.resolution, length=length)
    check_unet_config(model.config, channels=channels, length=length, resolution=cfg.resolution, option="the default UNet")
    return model


def local_model_config(spec) -> dict | None:
    """The config ``--model_config_name_or_path`` names when it is local: the JSON object of a file, or of a folder's
    ``config.json``; None for a Hub repo id (nothing of that name here, :func:`~diffusers_infonoise.schedule_io.local_or_hub`;
    a name ending in ``.json`` is always a file), which diffusers' ``load_config`` reads. Reads nothing from the network.

    Raises:
        ValueError: one line naming the option, what is wrong (no such file, a device, a folder without config.json,
            not valid JSON, not a JSON object) and what it accepts.
    """
    from ..schedule_io import ScheduleSourceError, local_or_hub, read_json_file

    text = str(spec)
    try:
        where = local_or_hub(text)
        if isinstance(where, str):
            if not text.endswith(".json"):
                return None
            raise ScheduleSourceError(f"no such file: {text}")
        if where.is_dir():
            where = where / "config.json"
            if not where.is_file():
                raise ScheduleSourceError(f"{text}: a folder without a config.json")
        return read_json_file(where)
    except ScheduleSourceError as err:
        raise ValueError(f"--model_config_name_or_path: {err}; accepted: {MODEL_CONFIG_ACCEPTED}") from None


def default_unet(channels: int, *, resolution: int | None = None, length: int | None = None):
    """A small ``UNet2DModel`` for (channels, resolution, resolution) images, or with ``length`` a
    ``UNet1DModel`` for (channels, length) sequences."""
    from diffusers import UNet1DModel, UNet2DModel

    if length is None and resolution is None:
        raise ValueError("default_unet: give resolution (images) or length (sequences)")
    if length is not None:
        # the temporal-ResNet blocks of UNet1DModel take the time embedding in every block (the
        # DownBlock1D family ignores it); every level but the last halves the length
        levels = 3 if length % 4 == 0 else (2 if length % 2 == 0 else 1)
        return UNet1DModel(
            sample_size=length,
            in_channels=channels,
            out_channels=channels,
            extra_in_channels=0,
            time_embedding_type="positional",
            use_timestep_embedding=True,
            flip_sin_to_cos=False,
            freq_shift=1,
            block_out_channels=(32, 64, 64)[:levels],
            down_block_types=("DownResnetBlock1D",) * levels,
            up_block_types=("UpResnetBlock1D",) * (levels - 1),
            mid_block_type="MidResTemporalBlock1D",
            out_block_type="OutConv1DBlock",
            act_fn="mish",
            norm_num_groups=8,
            layers_per_block=1,
        )
    return UNet2DModel(
        sample_size=resolution,
        in_channels=channels,
        out_channels=channels,
        layers_per_block=1,
        block_out_channels=(32, 64, 64),
        norm_num_groups=8,
        down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
    )


def check_unet_config(
    config, *, channels: int, resolution: int | None = None, length: int | None = None, option: str = "--model_config_name_or_path"
) -> None:
    """Refuse a UNet config that does not fit the training data: (channels, resolution, resolution)
    images for a ``UNet2DModel``, (channels, length) one-hot sequences for a ``UNet1DModel``.

    Raises:
        ValueError: naming ``option`` (where the config came from) and each mismatch.
    """
    problems = _1d_problems(config, channels, length) if length is not None else _2d_problems(config, channels, resolution)
    if problems:
        raise ValueError(f"{option}: " + "; ".join(problems))


def _2d_problems(config, channels: int, resolution: int) -> list[str]:
    """A UNet2DModel config must take the training images as they are: a model of another sample_size
    would train at --resolution and then save a pipeline that samples at its own size; a resolution its down
    blocks cannot halve fails deep inside torch at step 1."""
    size = config.sample_size if isinstance(config.sample_size, int) else tuple(config.sample_size)
    problems = []
    if size not in (resolution, (resolution, resolution)):
        problems.append(f"sample_size {size}, but --resolution is {resolution}")
    if config.in_channels != channels or config.out_channels != channels:
        problems.append(f"in/out_channels {config.in_channels}/{config.out_channels}, but the images have {channels}")
    factor = 2 ** (len(config.down_block_types) - 1)  # every down block but the last halves the images
    if resolution % factor:
        problems.append(
            f"{len(config.down_block_types)} down blocks halve the images {factor.bit_length() - 1} times: --resolution must be "
            f"a multiple of {factor}, got {resolution}"
        )
    return problems


def _1d_problems(config, channels: int, length: int) -> list[str]:
    """A UNet1DModel config must match the one-hot sequences: channels = alphabet size, sample_size = length,
    and the length must survive its downsamplings (a mismatch otherwise fails deep inside torch)."""
    problems = []
    if config.in_channels != channels or config.out_channels != channels:
        problems.append(f"in/out_channels {config.in_channels}/{config.out_channels}, but --alphabet has {channels} letters")
    if config.sample_size != length:
        problems.append(f"sample_size {config.sample_size}, but the sequences have length {length}")
    levels = len(config.block_out_channels)
    factor = 2 ** (levels if config.downsample_each_block else levels - 1)
    if length % factor:
        problems.append(f"{levels} levels halve the length {int(math.log2(factor))} times: it must be a multiple of {factor}, got {length}")
    return problems
