"""docs/integration.md, run as written: each snippet is executed at its place in a loop that holds the
variables of the diffusers script it is written for (the script's own statements around it are
re-stated here by their meaning, not copied). The model is the Bayes-optimal predictor of Gaussian
data N(0, S²), computed here from the scheduler's own tables, so the π each script learns must put
φ = π·w on the analytic entropy rate ρ ∝ mmse(σ)/σ² (METHOD.md §2, §4) within the floor.
"""

from __future__ import annotations

import argparse
import os
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from diffusers import DDPMScheduler, FlowMatchEulerDiscreteScheduler

from helpers import ROOT
from helpers.reference import gauss_mmse, total_variation, weight_by_hand

S = 0.5  # data scale
STEPS, BATCH, SHAPE = 300, 64, (4, 4, 4)


def snippets() -> dict[str, str]:
    text = (ROOT / "docs" / "integration.md").read_text()
    found = re.findall(r"<!-- snippet: (\S+) -->\n```python\n(.*?)```", text, flags=re.S)
    return {name: compile(code, f"docs/integration.md [{name}]", "exec") for name, code in found}


def test_every_python_block_of_the_page_is_a_named_snippet():
    text = (ROOT / "docs" / "integration.md").read_text()
    assert text.count("```python") == len(snippets()) >= 21


def _accelerator():
    from accelerate import Accelerator

    return Accelerator(cpu=True)


def _posterior(x, a, b):
    """Bayes x̂0 and ε̂ of x = a·x0 + b·ε for x0 ~ N(0, S²) (per dimension), a, b broadcast (B, 1, 1, 1)."""
    x0_hat = a * S**2 * x / (a**2 * S**2 + b**2)
    return x0_hat, (x - a * x0_hat) / b


def _batch(step: int, bsz: int = BATCH):
    gen = torch.Generator().manual_seed(10_000 + step)
    return torch.randn(bsz, *SHAPE, generator=gen) * S, torch.randn(bsz, *SHAPE, generator=gen)


def _tv_to_rho(sampler) -> float:
    """TV(φ, ρ) on the sampler's grid: π from its density, w and ρ by hand."""
    edges = sampler.estimator.edges.numpy()
    sig = np.exp(0.5 * (edges[1:] + edges[:-1]))
    pi = torch.exp(sampler._log_prob(torch.from_numpy(sig))).numpy()
    if sampler.prediction_type == "sample" and sampler.path.kind == "flow":
        # x0 loss of SD3's preconditioning: w is diffusers' weight u(s) itself
        s = sig / (1 + sig)
        w = {"none": np.ones_like(s), "sigma_sqrt": s**-2, "cosmap": 2 / (np.pi * (1 - 2 * s + 2 * s**2))}[sampler.objective.loss_weighting]
    else:
        w = weight_by_hand(sampler.prediction_type, sampler.objective.loss_weighting, sig, gamma=sampler.objective.snr_gamma or 5.0)
    return total_variation(pi * w, gauss_mmse(sig, S) / sig**2)


def run_ddpm(ns: dict, code: dict, steps: range) -> None:
    """diffusers' train_unconditional.py, ε branch (or its sample branch with ``args.prediction_type``), between
    its statements."""
    noise_scheduler = ns["noise_scheduler"]
    abar = noise_scheduler.alphas_cumprod.double()
    for step in steps:
        clean_images, noise = _batch(step)
        ns.update(clean_images=clean_images, bsz=clean_images.shape[0])
        exec(code["ddpm/draw"], ns)
        timesteps = ns["timesteps"]
        noisy_images = noise_scheduler.add_noise(clean_images, noise, timesteps)
        a, b = (abar[timesteps] ** 0.5).view(-1, 1, 1, 1), ((1 - abar[timesteps]) ** 0.5).view(-1, 1, 1, 1)
        x0_hat, eps_hat = _posterior(noisy_images.double(), a, b)
        if ns["args"].prediction_type == "sample":  # its loss: snr_weights · (x̂0 − x0)², the ε error
            ns.update(model_output=x0_hat.float(), loss=(a**2 / b**2 * (x0_hat - clean_images) ** 2).mean())
            exec(code["ddpm/update-sample"], ns)
        else:
            ns.update(model_output=eps_hat.float(), noise=noise, loss=F.mse_loss(eps_hat.float(), noise))
            exec(code["ddpm/update"], ns)
        ns["global_step"] = ns.get("global_step", 0) + 1
        exec(code["ddpm/step"], ns)
        exec(code["common/log"], ns)


def test_ddpm_unconditional_snippets(tmp_path):
    code = snippets()
    ns = {
        "noise_scheduler": DDPMScheduler(num_train_timesteps=1000),
        "F": F,
        "torch": torch,
        "args": argparse.Namespace(prediction_type="epsilon", seed=0, num_epochs=1),
        "accelerator": _accelerator(),
        "max_train_steps": STEPS,
    }
    exec(code["ddpm/setup"], ns)
    sampler = ns["sampler"]
    assert sampler.warmup_steps == 50 and sampler.prediction_type == "epsilon" and sampler.objective.loss_weighting == "none"
    logged = []
    ns["accelerator"].log = lambda values, step: logged.append((step, values))
    run_ddpm(ns, code, range(STEPS))
    # the tracker got the sampler's figures at every step; at the end they are those of the sampler
    assert [step for step, _ in logged] == list(range(1, STEPS + 1))
    last = logged[-1][1]
    assert last["infonoise/adapted"] == 1.0 and last["infonoise/tv_phi_rho"] == sampler._allocation_total_variation()
    assert logged[0][1]["infonoise/adapted"] == 0.0 and "infonoise/tv_phi_rho" not in logged[0][1]
    exec(code["ddpm/save"], ns)
    assert sampler.is_adapted and sampler.optimizer_step == STEPS
    # the cap is the latents' variance S² = 0.25, measured by observe_data
    assert abs(sampler.estimator.mmse_cap - S**2) < 0.01
    assert _tv_to_rho(sampler) <= 0.05 + 0.02
    assert ns["noise_scheduler"].config["_infonoise_schedule"]["adapted"]


def test_ddpm_sample_prediction_is_the_snr_weighted_x0_loss():
    """diffusers' --prediction_type sample: an SNR-weighted x0 loss (issue 20: read as an unweighted x0 loss,
    95.5% of the draws went to t < 100, TV 0.94 from the right π, while TV(φ, ρ̂) still read 0.05)."""
    code = snippets()
    ns = {
        "noise_scheduler": DDPMScheduler(num_train_timesteps=1000),
        "F": F,
        "torch": torch,
        "args": argparse.Namespace(prediction_type="sample", seed=0),
        "accelerator": _accelerator(),
        "max_train_steps": STEPS,
    }
    exec(code["ddpm/setup"], ns)
    sampler = ns["sampler"]
    assert (sampler.prediction_type, sampler.objective.loss_weighting) == ("sample", "snr")
    run_ddpm(ns, code, range(STEPS))
    assert sampler.is_adapted
    assert _tv_to_rho(sampler) <= 0.05 + 0.02  # φ = π·SNR on the analytic entropy rate
    # t < 100 holds ~3% of the draws here (the ε branch's run, the same loss written as the ε error, gives
    # the same 3.3%), not the 95.5% of the misread loss
    assert float(sampler.timestep_probabilities()[:100].sum()) < 0.1


def test_ddpm_snippets_resume_exactly_through_accelerate(tmp_path):
    """save_state at step 150 and load_state into a fresh accelerator and sampler: the same π and draws
    as the uninterrupted run, bit for bit (the sampler is a registered custom object)."""
    code = snippets()

    def fresh():
        ns = {
            "noise_scheduler": DDPMScheduler(num_train_timesteps=1000),
            "F": F,
            "torch": torch,
            "args": argparse.Namespace(prediction_type="epsilon", seed=3),
            "accelerator": _accelerator(),
            "max_train_steps": STEPS,
        }
        exec(code["ddpm/setup"], ns)
        return ns

    full = fresh()
    run_ddpm(full, code, range(STEPS))
    first = fresh()
    run_ddpm(first, code, range(150))
    first["accelerator"].save_state(str(tmp_path / "checkpoint-150"))
    resumed = fresh()
    resumed["accelerator"].load_state(str(tmp_path / "checkpoint-150"))
    resumed["global_step"] = 150
    run_ddpm(resumed, code, range(150, STEPS))
    assert resumed["sampler"].optimizer_step == STEPS and resumed["sampler"].num_updates == full["sampler"].num_updates
    assert torch.equal(resumed["sampler"].probs, full["sampler"].probs)
    assert torch.equal(resumed["levels"].timesteps, full["levels"].timesteps)

    # without the sampler's state the resumed run restarts the warm-up: step(global_step) says so
    lost = fresh()
    lost["global_step"] = 150
    with pytest.warns(UserWarning, match="register_for_checkpointing"):
        run_ddpm(lost, code, range(150, 151))


@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction"])
def test_sd_text_to_image_snippets_with_min_snr(prediction_type):
    code = snippets()
    noise_scheduler = DDPMScheduler(
        num_train_timesteps=1000, beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, prediction_type=prediction_type
    )
    args = argparse.Namespace(prediction_type=None, snr_gamma=5.0, seed=0, max_train_steps=STEPS)
    ns = {"noise_scheduler": noise_scheduler, "args": args, "accelerator": _accelerator()}
    exec(code["sd/setup"], ns)
    sampler = ns["sampler"]
    assert (sampler.prediction_type, sampler.objective.loss_weighting, sampler.objective.snr_gamma) == (prediction_type, "min_snr", 5.0)
    abar = noise_scheduler.alphas_cumprod.double()
    for step in range(STEPS):
        latents, noise = _batch(step)
        ns.update(latents=latents, bsz=latents.shape[0])
        exec(code["sd/draw"], ns)
        timesteps = ns["timesteps"]
        noisy_latents = noise_scheduler.add_noise(latents, noise, timesteps)
        a, b = (abar[timesteps] ** 0.5).view(-1, 1, 1, 1), ((1 - abar[timesteps]) ** 0.5).view(-1, 1, 1, 1)
        x0_hat, eps_hat = _posterior(noisy_latents.double(), a, b)
        if prediction_type == "epsilon":
            target, model_pred = noise, eps_hat.float()
        else:
            target = noise_scheduler.get_velocity(latents, noise, timesteps)
            model_pred = (a * eps_hat - b * x0_hat).float()
        ns.update(model_pred=model_pred, target=target)
        exec(code["sd/update"], ns)
        ns["global_step"] = step + 1
        exec(code["ddpm/step"], ns)
    assert sampler.is_adapted and abs(sampler.estimator.mmse_cap - S**2) < 0.01
    assert _tv_to_rho(sampler) <= 0.05 + 0.02


def run_flow(ns: dict, code: dict, prefix: str, *, precondition: bool, prior_scale: float | None = None):
    """SD3 / Flux DreamBooth between their statements: x = (1 − s)·x0 + s·ε; with ``prior_scale`` each
    batch is [instance, class] images, the class ones from another distribution (N(0, prior_scale²))."""
    for step in range(STEPS):
        model_input, noise = _batch(step)
        if prior_scale is not None:
            class_input, class_noise = _batch(50_000 + step)
            model_input = torch.cat([model_input, class_input * prior_scale / S])
            noise = torch.cat([noise, class_noise])
        ns.update(model_input=model_input, bsz=model_input.shape[0])
        exec(code[f"{prefix}/draw"], ns)
        sigmas = ns["sigmas"]
        assert torch.allclose(ns["timesteps"], sigmas.flatten() * 1000)
        noisy_model_input = (1.0 - sigmas) * model_input + sigmas * noise
        scale = torch.full_like(sigmas, S)
        if prior_scale is not None:
            scale[BATCH:] = prior_scale
        a, b = 1.0 - sigmas.double(), sigmas.double()
        x0_hat = a * scale.double() ** 2 * noisy_model_input / (a**2 * scale.double() ** 2 + b**2)
        velocity = ((noisy_model_input - a * x0_hat) / b - x0_hat).float()
        if precondition:
            model_pred, target = velocity * (-sigmas) + noisy_model_input, model_input
        else:
            model_pred, target = velocity, noise - model_input
        if prior_scale is not None:
            model_pred, _ = torch.chunk(model_pred, 2, dim=0)
            target, _ = torch.chunk(target, 2, dim=0)
        ns.update(model_pred=model_pred, target=target)
        exec(code["sd3/update"], ns)
        ns["global_step"] = step + 1
        exec(code["ddpm/step"], ns)


@pytest.mark.parametrize(
    "weighting_scheme,precondition_outputs",
    [
        ("logit_normal", 1),
        ("sigma_sqrt", 1),
        ("cosmap", 0),
        ("mode", 0),
    ],
)
def test_sd3_dreambooth_snippets_each_weighting_scheme(weighting_scheme, precondition_outputs, tmp_path):
    code = snippets()
    args = argparse.Namespace(
        weighting_scheme=weighting_scheme,
        precondition_outputs=precondition_outputs,
        logit_mean=0.0,
        logit_std=1.0,
        mode_scale=1.29,
        seed=0,
        max_train_steps=STEPS,
        output_dir=str(tmp_path),
        with_prior_preservation=False,
    )
    ns = {"noise_scheduler_copy": FlowMatchEulerDiscreteScheduler(shift=3.0), "args": args, "os": os, "accelerator": _accelerator()}
    exec(code["sd3/setup"], ns)
    sampler = ns["sampler"]
    assert sampler.prediction_type == ("sample" if precondition_outputs else "flow")
    assert sampler.objective.loss_weighting == (weighting_scheme if weighting_scheme in ("sigma_sqrt", "cosmap") else "none")
    assert sampler.describe()["base"]["name"] == (weighting_scheme if weighting_scheme in ("logit_normal", "mode") else "uniform")
    run_flow(ns, code, "sd3", precondition=bool(precondition_outputs))
    exec(code["flow/save"], ns)
    assert sampler.is_adapted
    assert _tv_to_rho(sampler) <= 0.05 + 0.02
    saved = FlowMatchEulerDiscreteScheduler.from_pretrained(tmp_path / "scheduler")
    assert saved.config["_infonoise_schedule"]["optimizer_steps"] == STEPS


def test_sd3_snippets_keep_class_images_out_of_the_statistics():
    """Prior preservation: the class images (scale 2, not 0.5) are noised and trained on, but only the
    instance half reaches the sampler, whose π is that of the instance data."""
    code = snippets()
    args = argparse.Namespace(
        weighting_scheme="logit_normal", precondition_outputs=1, seed=0, max_train_steps=STEPS, with_prior_preservation=True
    )
    ns = {"noise_scheduler_copy": FlowMatchEulerDiscreteScheduler(shift=3.0), "args": args, "accelerator": _accelerator()}
    exec(code["sd3/setup"], ns)
    run_flow(ns, code, "sd3", precondition=True, prior_scale=2.0)
    sampler = ns["sampler"]
    assert sampler.is_adapted and float(sampler.estimator.total_counts.sum()) == STEPS * BATCH
    assert _tv_to_rho(sampler) <= 0.05 + 0.02
    assert abs(sampler.data.variance - S**2) < 0.01  # the instance images' variance, not the class images' (4)


def test_flux_dreambooth_snippets_with_dynamic_shifting(tmp_path):
    code = snippets()
    # Flux's scheduler: dynamic shifting; the training table is the unshifted one
    noise_scheduler_copy = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15)
    assert torch.allclose(noise_scheduler_copy.timesteps[:3], torch.tensor([1000.0, 999.0, 998.0]))  # not shifted
    args = argparse.Namespace(
        weighting_scheme="none", seed=0, max_train_steps=STEPS, output_dir=str(tmp_path), with_prior_preservation=False
    )
    ns = {"noise_scheduler_copy": noise_scheduler_copy, "args": args, "os": os, "accelerator": _accelerator()}
    exec(code["flux/setup"], ns)
    sampler = ns["sampler"]
    assert sampler.prediction_type == "flow" and sampler.path.shift == 1.0
    run_flow(ns, code, "flux", precondition=False)
    exec(code["flow/save"], ns)
    assert sampler.is_adapted
    assert _tv_to_rho(sampler) <= 0.05 + 0.02


# ----------------------------------------------------------------------------------------------
# Fine-tuning: the start snippets (issue 28), each script's loss_fn as written, on Bayes-optimal stand-ins of its models
# ----------------------------------------------------------------------------------------------


class _Model:
    """A stand-in for a script's model: ``fn`` (the Bayes-optimal prediction) called as the script calls its model;
    ``eval``/``train`` recorded, as the start must measure in eval mode and leave the model training."""

    def __init__(self, fn, **config):
        self.fn, self.calls, self.training, self.config = fn, 0, True, SimpleNamespace(**config)

    def eval(self):
        self.training = False
        return self

    def train(self, mode: bool = True):
        self.training = mode
        return self

    def __call__(self, *args, **kwargs):
        assert not self.training, "the start measures the model in eval mode"
        self.calls += 1
        return self.fn(*args, **kwargs)


def _vae(shift: float = 0.0, scale: float = 1.0):
    """A VAE whose latents are its input: (latents − shift)·scale is the data the test feeds it, N(0, S²)."""
    encode = lambda x: SimpleNamespace(latent_dist=SimpleNamespace(sample=lambda: x))  # noqa: E731
    return SimpleNamespace(encode=encode, dtype=torch.float32, config=SimpleNamespace(scaling_factor=scale, shift_factor=shift))


def _flow_velocity(noisy: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The Bayes velocity ε̂ − x̂0 of x = (1 − s)·x0 + s·ε for x0 ~ N(0, S²), elementwise (so packing does not matter)."""
    s = s.double().view(-1, *([1] * (noisy.ndim - 1)))
    x0_hat, eps_hat = _posterior(noisy.double(), 1.0 - s, s)
    return (eps_hat - x0_hat).float()


def _start_checks(sampler, model) -> None:
    """What a profile start must leave before step 1: π from the model's errors, near the analytic one, the data's
    variance measured through observe_data, the model back in training mode, and no warm-up left."""
    assert sampler.is_adapted and sampler.num_updates == 1 and sampler.optimizer_step == 0
    assert model.training and model.calls >= 1 and sampler.warmup_steps == 0
    assert abs(sampler.data.variance - S**2) < 0.02
    assert _tv_to_rho(sampler) <= 0.05 + 0.02  # φ = π·w on ρ ∝ mmse/σ² from about 8 levels a bin


def test_ddpm_fine_tuning_snippets_start_from_the_models_profile_and_skip_it_on_resume(tmp_path):
    code = snippets()
    noise_scheduler = DDPMScheduler(num_train_timesteps=1000)
    abar = noise_scheduler.alphas_cumprod.double()

    def unet(noisy, t):
        a, b = (abar[t] ** 0.5).view(-1, 1, 1, 1), ((1 - abar[t]) ** 0.5).view(-1, 1, 1, 1)
        return SimpleNamespace(sample=_posterior(noisy.double(), a, b)[1].float())

    def fresh():
        ns = {
            "noise_scheduler": noise_scheduler,
            "F": F,
            "torch": torch,
            "args": argparse.Namespace(prediction_type="epsilon", seed=0),
            "accelerator": _accelerator(),
            "max_train_steps": STEPS,
            "weight_dtype": torch.float32,
            "model": _Model(unet),
            "train_dataloader": [{"input": _batch(10 + i)[0]} for i in range(4)],
            "global_step": 0,
        }
        exec(code["ddpm/setup"], ns)
        exec(code["ddpm/start"], ns)
        return ns

    ns = fresh()
    assert ns["start"].choice == "profile"  # a pretrained model, no stored schedule
    exec(code["ddpm/apply"], ns)
    _start_checks(ns["sampler"], ns["model"])
    started = ns["sampler"].probs.clone()
    ns["model"].eval()  # the training loop's model calls below are the test's own
    run_ddpm(ns, code, range(20))
    assert ns["sampler"].optimizer_step == 20 and torch.equal(ns["sampler"].probs, started)  # no refresh yet: still the start's
    ns["accelerator"].save_state(str(tmp_path / "checkpoint-20"))

    resumed = fresh()
    resumed["accelerator"].load_state(str(tmp_path / "checkpoint-20"))
    resumed["global_step"] = 20
    exec(code["ddpm/apply"], resumed)  # after load_state: skipped
    assert resumed["model"].calls == 0 and torch.equal(resumed["sampler"].probs, started)
    assert resumed["sampler"].optimizer_step == 20


@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction"])
def test_sd_fine_tuning_snippets_start_from_the_models_profile(prediction_type):
    code = snippets()
    noise_scheduler = DDPMScheduler(
        num_train_timesteps=1000, beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, prediction_type=prediction_type
    )
    abar = noise_scheduler.alphas_cumprod.double()

    def unet(noisy_latents, t, encoder_hidden_states, return_dict=True):
        assert encoder_hidden_states.shape[0] == noisy_latents.shape[0] and not return_dict
        a, b = (abar[t] ** 0.5).view(-1, 1, 1, 1), ((1 - abar[t]) ** 0.5).view(-1, 1, 1, 1)
        x0_hat, eps_hat = _posterior(noisy_latents.double(), a, b)
        return [(eps_hat if prediction_type == "epsilon" else a * eps_hat - b * x0_hat).float()]

    args = argparse.Namespace(prediction_type=None, snr_gamma=5.0, seed=0, max_train_steps=STEPS, noise_offset=0.0, input_perturbation=0.0)
    ns = {
        "noise_scheduler": noise_scheduler,
        "args": args,
        "accelerator": _accelerator(),
        "torch": torch,
        "weight_dtype": torch.float32,
        "vae": _vae(),
        "text_encoder": lambda ids, return_dict=True: (torch.zeros(ids.shape[0], 2, 3),),
        "unet": _Model(unet),
        "train_dataloader": [{"pixel_values": _batch(20 + i)[0], "input_ids": torch.zeros(BATCH, 4, dtype=torch.long)} for i in range(4)],
        "global_step": 0,
    }
    exec(code["sd/setup"], ns)
    exec(code["sd/start"], ns)
    assert ns["start"].choice == "profile"
    exec(code["sd/apply"], ns)
    _start_checks(ns["sampler"], ns["unet"])


def _flow_ns(args, transformer, **extra) -> dict:
    ns = {
        "noise_scheduler_copy": FlowMatchEulerDiscreteScheduler(shift=3.0, **extra),
        "args": args,
        "os": os,
        "torch": torch,
        "accelerator": _accelerator(),
        "weight_dtype": torch.float32,
        "vae": _vae(),
        "vae_config_shift_factor": 0.1,  # the latents the scripts compute: (z − shift)·scale is the N(0, S²) data
        "vae_config_scaling_factor": 1.5,
        "transformer": _Model(transformer, guidance_embeds=True),
        "global_step": 0,
    }
    ns["train_dataloader"] = [{"pixel_values": _batch(30 + i)[0] / 1.5 + 0.1, "prompts": ["a photo"] * BATCH} for i in range(4)]
    return ns


@pytest.mark.parametrize("precondition_outputs", [1, 0])
def test_sd3_fine_tuning_snippets_start_from_the_models_profile_or_the_stored_schedule(precondition_outputs):
    code = snippets()

    def transformer(hidden_states, timestep, encoder_hidden_states, pooled_projections, return_dict=True):
        assert encoder_hidden_states is ns["prompt_embeds"] and pooled_projections is ns["pooled_prompt_embeds"]
        return [_flow_velocity(hidden_states, timestep / 1000)]

    args = argparse.Namespace(weighting_scheme="logit_normal", precondition_outputs=precondition_outputs, seed=0, max_train_steps=STEPS)
    args.with_prior_preservation = False
    ns = _flow_ns(args, transformer)
    ns.update(prompt_embeds=torch.zeros(1, 2, 3), pooled_prompt_embeds=torch.zeros(1, 3))
    exec(code["sd3/setup"], ns)
    exec(code["sd3/start"], ns)
    assert ns["start"].choice == "profile"
    exec(code["flow/apply"], ns)
    sampler = ns["sampler"]
    _start_checks(sampler, ns["transformer"])

    # the schedule of that start, stored in the pretrained scheduler: auto takes it, and measures nothing
    stored = _flow_ns(args, transformer)
    sampler.save_to_scheduler(stored["noise_scheduler_copy"])
    stored.update(prompt_embeds=ns["prompt_embeds"], pooled_prompt_embeds=ns["pooled_prompt_embeds"])
    exec(code["sd3/setup"], stored)
    exec(code["sd3/start"], stored)
    assert stored["start"].choice == "stored"
    exec(code["flow/apply"], stored)
    assert stored["transformer"].calls == 0 and torch.equal(stored["sampler"].probs, sampler.probs)


def test_flux_fine_tuning_snippets_start_from_the_models_profile_and_skip_it_on_resume():
    from diffusers import FluxPipeline

    code = snippets()
    seen = {}

    def transformer(hidden_states, timestep, guidance, pooled_projections, encoder_hidden_states, txt_ids, img_ids, return_dict=True):
        assert hidden_states.shape == (BATCH, 4, 16) and img_ids.shape == (4, 3)  # packed 2x2: 4 tokens of 4x4 channels
        seen["guidance"] = guidance
        return [_flow_velocity(hidden_states, timestep)]  # Flux's transformer gets s = timesteps / 1000

    def compute_text_embeddings(prompts, text_encoders, tokenizers):
        return torch.zeros(len(prompts), 2, 3), torch.zeros(len(prompts), 3), torch.zeros(2, 3)

    args = argparse.Namespace(weighting_scheme="none", seed=0, max_train_steps=STEPS, with_prior_preservation=False, guidance_scale=3.5)
    ns = _flow_ns(args, transformer, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15)
    ns.update(
        FluxPipeline=FluxPipeline,
        compute_text_embeddings=compute_text_embeddings,
        text_encoders=None,
        tokenizers=None,
        unwrap_model=lambda model: model,
        vae_config_block_out_channels=(8, 16, 32, 32),  # vae_scale_factor 8, as Flux's VAE
    )
    exec(code["flux/setup"], ns)
    exec(code["flux/start"], ns)
    assert ns["start"].choice == "profile"
    exec(code["flow/apply"], ns)
    _start_checks(ns["sampler"], ns["transformer"])
    assert torch.equal(seen["guidance"], torch.full((BATCH,), 3.5))

    resumed = _flow_ns(args, transformer, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15)
    resumed.update({k: ns[k] for k in ("FluxPipeline", "compute_text_embeddings", "text_encoders", "tokenizers", "unwrap_model")})
    resumed["vae_config_block_out_channels"] = ns["vae_config_block_out_channels"]
    exec(code["flux/setup"], resumed)
    exec(code["flux/start"], resumed)
    resumed["global_step"] = 40  # as after load_state: the start is not applied again
    exec(code["flow/apply"], resumed)
    assert resumed["transformer"].calls == 0 and not resumed["sampler"].is_adapted


def test_the_resumes_that_are_not_exact_include_sd3_dreambooth_mid_epoch_on_one_process():
    """The page named only multi-process resumes as inexact; diffusers' SD3 DreamBooth script restarts the resumed
    epoch at its first batch (no batch is skipped), so a mid-epoch resume differs on one process too."""
    text = " ".join((ROOT / "docs" / "integration.md").read_text().split())
    section = text[text.index("**Which resumes are exact.**") : text.index("## What was run")]
    assert "`train_dreambooth_lora_sd3.py` is not exact on one process either" in section
    assert "skipping none of the batches" in section and "skip_first_batches" in section
