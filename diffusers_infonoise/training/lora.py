"""LoRA adapters on the trained model (peft): which modules, adding them, reading and loading their weights."""

from __future__ import annotations

from typing import Iterable

from ..logs import get_logger

logger = get_logger(__name__)

__all__ = [
    "UNET_LORA_TARGETS",
    "SD3_LORA_TARGETS",
    "add_lora_adapter",
    "lora_layers",
    "load_lora_layers",
]


#: peft target modules of diffusers' LoRA scripts
UNET_LORA_TARGETS = ("to_k", "to_q", "to_v", "to_out.0")


SD3_LORA_TARGETS = (
    "attn.add_k_proj",
    "attn.add_q_proj",
    "attn.add_v_proj",
    "attn.to_add_out",
    "attn.to_k",
    "attn.to_out.0",
    "attn.to_q",
    "attn.to_v",
)


def add_lora_adapter(model, *, rank: int, alpha: float | None = None, target_modules: Iterable[str]) -> list:
    """Freeze ``model`` and add a peft LoRA adapter (``LoraConfig``, Gaussian init, ``model.add_adapter``)
    on ``target_modules``; returns the trainable (LoRA) parameters."""
    from peft import LoraConfig

    model.requires_grad_(False)
    config = LoraConfig(
        r=rank, lora_alpha=alpha if alpha is not None else rank, init_lora_weights="gaussian", target_modules=list(target_modules)
    )
    model.add_adapter(config)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"LoRA: none of the target modules {list(target_modules)} exist in {type(model).__name__}")
    return params


def lora_layers(model) -> dict:
    """The adapter weights of a peft-adapted diffusers model, in diffusers' LoRA format
    (what ``<Pipeline>.save_lora_weights`` takes)."""
    from diffusers.utils import convert_state_dict_to_diffusers
    from peft.utils import get_peft_model_state_dict

    return convert_state_dict_to_diffusers(get_peft_model_state_dict(model))


def load_lora_layers(model, pipeline_cls, directory: str, *, prefix: str) -> None:
    """Load adapter weights written by ``pipeline_cls.save_lora_weights`` into the adapted ``model``.

    Raises:
        ValueError: when the folder's LoRA does not match the model's adapter (unexpected keys).
    """
    from diffusers.utils import convert_unet_state_dict_to_peft
    from peft.utils import set_peft_model_state_dict

    state = pipeline_cls.lora_state_dict(directory)
    if isinstance(state, tuple):  # (state_dict, network_alphas) on the SD loader, the state dict alone on SD3's
        state = state[0]
    state = {k[len(prefix) + 1 :]: v for k, v in state.items() if k.startswith(prefix + ".")}
    result = set_peft_model_state_dict(model, convert_unet_state_dict_to_peft(state), adapter_name="default")
    unexpected = getattr(result, "unexpected_keys", None)
    if unexpected:
        raise ValueError(f"{directory}: LoRA weights that this adapter does not have: {unexpected[:5]}")
