"""Tiny random text-to-image pipelines and tokenizers, built offline from configs.

Nothing here downloads anything: the CLIP tokenizer gets a byte-level BPE vocabulary written in
code (the 256 byte symbols, their end-of-word forms and merges for a few caption words), the T5
tokenizer a Unigram model trained with ``tokenizers`` on a few captions. The models are random and
a few thousand parameters each, so that a training step takes milliseconds on a CPU.

* :func:`save_tiny_sd_pipeline`: ``StableDiffusionPipeline`` (UNet2DConditionModel, AutoencoderKL
  with a 2x downsampling, CLIPTextModel) with the SD 1.x scheduler config as a ``PNDMScheduler``,
  as on the Hub; the training script loads it as a ``DDPMScheduler``.
* :func:`save_tiny_sd3_pipeline`: ``StableDiffusion3Pipeline`` (SD3Transformer2DModel,
  AutoencoderKL with SD3's scaling and shift factors, two CLIPTextModelWithProjection, a
  T5EncoderModel) with a ``FlowMatchEulerDiscreteScheduler(shift=3.0)`` as SD3 ships it.

Images are 16x16 (latents 8x8, 4 channels). ``size="small"`` (64x64 images, a few million
parameters) and ``size="full"`` (SD 1.5's UNet, VAE and CLIP-L; SD3-medium's transformer and VAE
with shallow text encoders of the real widths) are for ``benchmarks/cost/t2i_step_time.py``.
"""

from __future__ import annotations

import json
import os

import torch

RESOLUTION = 16
CLIP_MAX_LENGTH = 16
CAPTION_WORDS = (
    "a",
    "an",
    "photo",
    "of",
    "the",
    "t-shirt/top",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle",
    "boot",
    "red",
    "blue",
)
CAPTIONS = (
    "a photo of a t-shirt/top",
    "a photo of a trouser",
    "a photo of a pullover",
    "a photo of a dress",
    "a photo of a coat",
    "a photo of a sandal",
    "a photo of a shirt",
    "a photo of a sneaker",
    "a photo of a bag",
    "a photo of an ankle boot",
    "a red dress",
    "a blue coat",
)


def tiny_unet2d(sample_size: int = 8):
    """A one-channel ``UNet2DModel`` of two 8/16-channel blocks without attention: the smallest pixel denoiser the
    tests save and load as a pipeline."""
    from diffusers import UNet2DModel

    return UNet2DModel(
        sample_size=sample_size,
        in_channels=1,
        out_channels=1,
        layers_per_block=1,
        block_out_channels=(8, 16),
        norm_num_groups=4,
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
    )


def build_clip_tokenizer(max_length: int = CLIP_MAX_LENGTH):
    """A ``CLIPTokenizer`` with a small byte-level BPE vocabulary (≈ 600 entries), no download."""
    from transformers import CLIPTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    symbols = list(bytes_to_unicode().values())
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for s in symbols + [s + "</w>" for s in symbols]:
        vocab[s] = len(vocab)
    merges = []
    for word in CAPTION_WORDS:
        parts = [c for c in word[:-1]] + [word[-1] + "</w>"]
        while len(parts) > 1:  # merge left to right: "p h o t o</w>" → "ph o t o</w>" → ...
            pair = (parts[0], parts[1])
            if pair not in merges:
                merges.append(pair)
            vocab.setdefault(parts[0] + parts[1], len(vocab))
            parts = [parts[0] + parts[1]] + parts[2:]
    return CLIPTokenizer(vocab=vocab, merges=merges, model_max_length=max_length)


def build_t5_tokenizer():
    """A ``T5Tokenizer`` (fast, sentencepiece-style Unigram) trained on a few captions, no download."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import T5Tokenizer

    tk = Tokenizer(models.Unigram())
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=120, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    tk.train_from_iterator(list(CAPTIONS) * 4, trainer)
    pieces = [(piece, score) for piece, score in json.loads(tk.to_str())["model"]["vocab"]]
    return T5Tokenizer(vocab=pieces, extra_ids=0, model_max_length=512)


#: per size: image resolution, CLIP (hidden, layers, heads, max length), VAE blocks, UNet, SD3 transformer, T5
SIZES = {
    "tiny": dict(
        resolution=RESOLUTION,
        clip=(32, 2, 4, CLIP_MAX_LENGTH),
        clip_g=(32, 2, 4),
        vae=((8, 16), 1, 4),
        unet=dict(
            block_out_channels=(16, 32),
            layers_per_block=1,
            norm_num_groups=8,
            attention_head_dim=4,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        ),
        sd3=dict(num_layers=1, attention_head_dim=8, num_attention_heads=2, caption_projection_dim=16, pos_embed_max_size=16),
        t5=dict(d_model=32, d_ff=37, d_kv=8, num_layers=1, num_heads=4),
        latent_channels_sd3=4,
    ),
    "small": dict(
        resolution=64,
        clip=(64, 2, 4, 32),
        clip_g=(64, 2, 4),
        vae=((16, 32, 32), 1, 8),
        unet=dict(
            block_out_channels=(64, 128),
            layers_per_block=1,
            norm_num_groups=16,
            attention_head_dim=8,
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        ),
        sd3=dict(num_layers=4, attention_head_dim=32, num_attention_heads=4, caption_projection_dim=128, pos_embed_max_size=32),
        t5=dict(d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4),
        latent_channels_sd3=4,
    ),
    # SD 1.5's UNet, VAE and CLIP-L; SD3-medium's transformer and 16-channel VAE, with the real widths of
    # CLIP-G and T5-XXL but two layers each (random weights: only the compute matters)
    "full": dict(
        resolution=512,
        clip=(768, 12, 12, 77),
        clip_g=(1280, 2, 20),
        vae=((128, 256, 512, 512), 2, 32),
        unet=dict(
            block_out_channels=(320, 640, 1280, 1280),
            layers_per_block=2,
            norm_num_groups=32,
            attention_head_dim=8,
            down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        ),
        sd3=dict(num_layers=24, attention_head_dim=64, num_attention_heads=24, caption_projection_dim=1536, pos_embed_max_size=192),
        t5=dict(d_model=4096, d_ff=10240, d_kv=64, num_layers=2, num_heads=64),
        latent_channels_sd3=16,
    ),
}


def _clip_config(size: str, projection: bool, big_g: bool = False):
    from transformers import CLIPTextConfig

    cfg = SIZES[size]
    hidden, layers, heads = cfg["clip_g"] if big_g else cfg["clip"][:3]
    max_length = cfg["clip"][3]
    return CLIPTextConfig(
        vocab_size=1000 if size == "tiny" else 49408,
        hidden_size=hidden,
        intermediate_size=4 * hidden if size != "tiny" else 37,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        max_position_embeddings=max_length,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
        projection_dim=hidden if projection and size != "tiny" else 32,
        hidden_act="gelu",
    )


def _vae(size: str, latent_channels: int, **extra):
    from diffusers import AutoencoderKL

    blocks, layers, groups = SIZES[size]["vae"]
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        latent_channels=latent_channels,
        block_out_channels=blocks,
        layers_per_block=layers,
        norm_num_groups=groups,
        sample_size=SIZES[size]["resolution"],
        down_block_types=("DownEncoderBlock2D",) * len(blocks),
        up_block_types=("UpDecoderBlock2D",) * len(blocks),
        **extra,
    )


def _latent_size(size: str) -> int:
    return SIZES[size]["resolution"] // 2 ** (len(SIZES[size]["vae"][0]) - 1)


def save_tiny_sd_pipeline(path: str, *, seed: int = 0, size: str = "tiny") -> str:
    """Save a random Stable Diffusion (1.x layout) pipeline of ``size`` to ``path``; returns ``path``."""
    from diffusers import PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel

    torch.manual_seed(seed)
    cfg = SIZES[size]
    unet = UNet2DConditionModel(
        sample_size=_latent_size(size), in_channels=4, out_channels=4, cross_attention_dim=cfg["clip"][0], **cfg["unet"]
    )
    # the SD 1.x scheduler config as the Hub repositories ship it
    scheduler = PNDMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        num_train_timesteps=1000,
        set_alpha_to_one=False,
        skip_prk_steps=True,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        unet=unet,
        vae=_vae(size, 4, scaling_factor=0.18215),
        text_encoder=CLIPTextModel(_clip_config(size, False)),
        tokenizer=build_clip_tokenizer(cfg["clip"][3]),
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(path)
    return path


def save_tiny_sd3_pipeline(path: str, *, seed: int = 0, shift: float = 3.0, size: str = "tiny") -> str:
    """Save a random Stable Diffusion 3 pipeline of ``size`` to ``path``; returns ``path``."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextModelWithProjection, T5Config, T5EncoderModel

    torch.manual_seed(seed)
    cfg = SIZES[size]
    clip_l, clip_g = _clip_config(size, True), _clip_config(size, True, big_g=True)
    channels = cfg["latent_channels_sd3"]
    transformer = SD3Transformer2DModel(
        sample_size=_latent_size(size),
        patch_size=2,
        in_channels=channels,
        out_channels=channels,
        joint_attention_dim=cfg["t5"]["d_model"],
        pooled_projection_dim=clip_l.projection_dim + clip_g.projection_dim,
        **cfg["sd3"],
    )
    t5 = T5EncoderModel(
        T5Config(
            vocab_size=128,
            relative_attention_num_buckets=8 if size == "tiny" else 32,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
            **cfg["t5"],
        )
    )
    pipe = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=shift),
        vae=_vae(size, channels, scaling_factor=1.5305, shift_factor=0.0609),
        text_encoder=CLIPTextModelWithProjection(clip_l),
        tokenizer=build_clip_tokenizer(cfg["clip"][3]),
        text_encoder_2=CLIPTextModelWithProjection(clip_g),
        tokenizer_2=build_clip_tokenizer(cfg["clip"][3]),
        text_encoder_3=t5,
        tokenizer_3=build_t5_tokenizer(),
    )
    pipe.save_pretrained(path)
    return path


def save_tiny_sdxl_pipeline(path: str, *, seed: int = 0) -> str:
    """Save a random Stable Diffusion XL pipeline (UNet2DConditionModel with SDXL's ``text_time``
    micro-conditioning, CLIPTextModel + CLIPTextModelWithProjection whose hidden states are
    concatenated, AutoencoderKL with SDXL's scaling factor; the Hub's EulerDiscreteScheduler config)
    to ``path``; returns ``path``."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    torch.manual_seed(seed)
    cfg = SIZES["tiny"]
    clip_l, clip_g = _clip_config("tiny", False), _clip_config("tiny", True, big_g=True)
    time_dim = 8
    unet = UNet2DConditionModel(
        sample_size=_latent_size("tiny"),
        in_channels=4,
        out_channels=4,
        cross_attention_dim=clip_l.hidden_size + clip_g.hidden_size,
        addition_embed_type="text_time",
        addition_time_embed_dim=time_dim,
        projection_class_embeddings_input_dim=6 * time_dim + clip_g.projection_dim,
        use_linear_projection=True,
        **cfg["unet"],
    )
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        num_train_timesteps=1000,
        steps_offset=1,
        timestep_spacing="leading",
    )
    pipe = StableDiffusionXLPipeline(
        unet=unet,
        vae=_vae("tiny", 4, scaling_factor=0.13025),
        text_encoder=CLIPTextModel(clip_l),
        tokenizer=build_clip_tokenizer(cfg["clip"][3]),
        text_encoder_2=CLIPTextModelWithProjection(clip_g),
        tokenizer_2=build_clip_tokenizer(cfg["clip"][3]),
        scheduler=scheduler,
    )
    pipe.save_pretrained(path)
    return path


def save_tiny_flux_pipeline(path: str, *, seed: int = 0, guidance_embeds: bool = True) -> str:
    """Save a random Flux.1 pipeline (FluxTransformer2DModel with the guidance embedding of the
    guidance-distilled models, AutoencoderKL with Flux's scaling and shift factors, CLIPTextModel for
    the pooled prompt, T5EncoderModel; FlowMatchEulerDiscreteScheduler with dynamic shifting, as
    FLUX.1-dev ships it) to ``path``; returns ``path``."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextModel, T5Config, T5EncoderModel

    torch.manual_seed(seed)
    cfg = SIZES["tiny"]
    clip = _clip_config("tiny", False)
    channels = cfg["latent_channels_sd3"]
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=4 * channels,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,
        num_attention_heads=2,
        joint_attention_dim=cfg["t5"]["d_model"],
        pooled_projection_dim=clip.hidden_size,
        guidance_embeds=guidance_embeds,
        axes_dims_rope=(4, 6, 6),
    )
    t5 = T5EncoderModel(
        T5Config(vocab_size=128, relative_attention_num_buckets=8, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, **cfg["t5"])
    )
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15, base_image_seq_len=256, max_image_seq_len=4096
    )
    pipe = FluxPipeline(
        transformer=transformer,
        scheduler=scheduler,
        vae=_vae("tiny", channels, scaling_factor=0.3611, shift_factor=0.1159),
        text_encoder=CLIPTextModel(clip),
        tokenizer=build_clip_tokenizer(cfg["clip"][3]),
        text_encoder_2=t5,
        tokenizer_2=build_t5_tokenizer(),
    )
    pipe.save_pretrained(path)
    return path


def write_captioned_image_folder(path: str, num_images: int = 6, size: int = 20) -> str:
    """An image folder with ``metadata.jsonl`` (``file_name``, ``text``) as diffusers' scripts read it."""
    import numpy as np
    from PIL import Image

    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(0)
    with open(os.path.join(path, "metadata.jsonl"), "w") as f:
        for i in range(num_images):
            name = f"img_{i}.png"
            Image.fromarray(rng.integers(0, 256, (size, size + 4, 3), dtype=np.uint8)).save(os.path.join(path, name))
            f.write(json.dumps({"file_name": name, "text": CAPTIONS[i % len(CAPTIONS)]}) + "\n")
    return path
