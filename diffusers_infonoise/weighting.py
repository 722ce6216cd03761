"""Loss parameterizations and loss weights, expressed on the x0-space error (METHOD.md §3-4).

Two facts about a training loss decide what InfoNoise must do with it:

* its **prediction type** (what the per-sample squared error measures). The unweighted x0-space
  error is ``e = c(σ)·L`` with the conversion factor ``c`` of :func:`x0_error_factor`;
* its **loss weighting** ``u(σ)``, the weight the user's loss puts on ``L`` in its own
  parameterization (:func:`loss_weight`).

The user's loss is then ``u·L = (u/c)·e``, so the weight on the x0 error is ``w = u/c``
(:func:`x0_loss_weight`), the ``w`` of ``π ∝ ρ̂/w`` (METHOD.md §4).

All functions take VE σ (a float64 tensor of any shape, ``inf`` allowed) and return a tensor of
the same shape. SNR is ``1/σ²``; the flow noise level is ``s = σ/(1 + σ)``.
"""

from __future__ import annotations

import math
from typing import Callable, Union

import torch

__all__ = [
    "PREDICTION_TYPES",
    "LOSS_WEIGHTINGS",
    "x0_error_factor",
    "loss_weight",
    "x0_loss_weight",
    "validate_prediction_type",
    "x0_from_output",
    "validate_loss_weighting",
    "per_sample_mse",
]

#: per-sample error the script reports → meaning
PREDICTION_TYPES = {
    "sample": "‖x̂0 − x0‖² (x0 prediction, EDM's denoiser D, SD3 with precondition_outputs)",
    "epsilon": "‖ε̂ − ε‖²",
    "v_prediction": "‖v̂ − v‖² with v = a·ε − b·x0 (VP)",
    "flow": "‖v̂ − v‖² with the flow velocity v = ε − x0 (diffusers' flow matching)",
    "edm_f": "‖F̂ − F‖², the raw network output F of EDM's D = c_skip·x + c_out·F",
}

LOSS_WEIGHTINGS = ("none", "edm", "min_snr", "snr", "sigma_sqrt", "cosmap")

LossWeighting = Union[str, Callable[[torch.Tensor], torch.Tensor]]


def per_sample_mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(B,) float32 mean squared error of a (B, ...) prediction over all but the batch dimension: the
    unweighted per-sample loss in the prediction's own parameterization. Differentiable, so a training loop
    weights and backpropagates it; :meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.update`
    takes it as it is (it detaches what it records)."""
    return ((pred.float() - target.float()) ** 2).mean(dim=list(range(1, pred.ndim)))


def x0_from_output(prediction_type: str, x: torch.Tensor, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The x0 estimate a prediction implies on a path ``x = a·x0 + b·ε`` (METHOD.md §1, §3).

    ``epsilon``: ``(x − b·ε̂)/a``; ``v_prediction`` (VP, ``a² + b² = 1``): ``a·x − b·v̂``; ``flow``
    (velocity ``ε − x0``, ``a = 1 − s``, ``b = s``): ``x − b·v̂``; ``sample``: the output itself. ``a`` and
    ``b`` are per sample (B,) and broadcast over the other dimensions; an EDM denoiser's D is a ``sample``.

    Raises:
        ValueError: ``edm_f`` (the raw EDM output needs the scheduler's preconditioning) or an unknown type.
    """
    shape = (-1,) + (1,) * (x.ndim - 1)
    a, b = a.to(device=x.device, dtype=x.dtype).view(shape), b.to(device=x.device, dtype=x.dtype).view(shape)
    if prediction_type == "epsilon":
        return (x - b * out) / a
    if prediction_type == "v_prediction":
        return a * x - b * out
    if prediction_type == "flow":
        return x - b * out
    if prediction_type == "sample":
        return out
    raise ValueError(
        f"prediction_type: {prediction_type!r} has no x0 form without the scheduler's preconditioning; "
        "accepted: epsilon, v_prediction, flow, sample"
    )


def validate_prediction_type(prediction_type: str) -> str:
    """Return ``prediction_type`` or raise ``ValueError`` listing the accepted values."""
    if prediction_type not in PREDICTION_TYPES:
        raise ValueError(f"prediction_type: unknown value {prediction_type!r}; accepted: {', '.join(PREDICTION_TYPES)}")
    return prediction_type


def validate_loss_weighting(loss_weighting, snr_gamma: float | None = None):
    """Check a loss weighting (a name of :data:`LOSS_WEIGHTINGS` or a callable) and its ``snr_gamma``.

    Raises:
        ValueError: unknown name, ``min_snr`` without a positive ``snr_gamma``, or ``snr_gamma`` given
            for another weighting.
        TypeError: neither a string nor a callable.
    """
    if callable(loss_weighting):
        return loss_weighting
    if not isinstance(loss_weighting, str):
        raise TypeError(f"loss_weighting: expected a string or a callable, got {type(loss_weighting).__name__}")
    if loss_weighting not in LOSS_WEIGHTINGS:
        raise ValueError(f"loss_weighting: unknown value {loss_weighting!r}; accepted: {', '.join(LOSS_WEIGHTINGS)} or a callable")
    if loss_weighting == "min_snr" and not (
        isinstance(snr_gamma, (int, float)) and not isinstance(snr_gamma, bool) and math.isfinite(snr_gamma) and snr_gamma > 0
    ):
        raise ValueError(f"snr_gamma: loss_weighting='min_snr' needs a finite float snr_gamma > 0, got {snr_gamma!r}")
    if loss_weighting != "min_snr" and snr_gamma is not None:
        raise ValueError(f"snr_gamma: only used with loss_weighting='min_snr', got loss_weighting={loss_weighting!r}")
    return loss_weighting


def _flow_s(sigmas: torch.Tensor) -> torch.Tensor:
    return 1.0 / (1.0 + 1.0 / sigmas)


def x0_error_factor(prediction_type: str, sigmas: torch.Tensor, *, sigma_data: float = 0.5) -> torch.Tensor:
    """Conversion ``c(σ)`` with ``e_x0 = c(σ)·L`` for a per-sample error ``L`` (METHOD.md §3 table).

    ============== ====================================================
    prediction     c(σ)
    ============== ====================================================
    sample         1
    epsilon        σ²
    v_prediction   b² = σ²/(1 + σ²)
    flow           s² = (σ/(1 + σ))²
    edm_f          c_out² = (σ·σ_data)²/(σ² + σ_data²)
    ============== ====================================================

    Bayes-optimal predictors make ``c·L`` equal to the x0 MMSE in every row. For ``epsilon`` at
    σ = inf the factor is inf (an ε-error carries no information there); callers drop such
    non-finite errors.
    """
    validate_prediction_type(prediction_type)
    sigmas = torch.as_tensor(sigmas, dtype=torch.float64)
    if prediction_type == "sample":
        return torch.ones_like(sigmas)
    if prediction_type == "epsilon":
        return sigmas**2
    if prediction_type == "v_prediction":
        return 1.0 / (1.0 + 1.0 / sigmas**2)
    if prediction_type == "flow":
        return _flow_s(sigmas) ** 2
    # edm_f: c_out = σ·σ_d/sqrt(σ² + σ_d²) (Karras et al. 2022, Table 1)
    return sigma_data**2 / (1.0 + sigma_data**2 / sigmas**2)


def loss_weight(
    loss_weighting: LossWeighting,
    prediction_type: str,
    sigmas: torch.Tensor,
    *,
    snr_gamma: float | None = None,
    sigma_data: float = 0.5,
) -> torch.Tensor:
    """The weight ``u(σ)`` the user's loss applies to its own per-sample error (METHOD.md §4).

    * ``"none"``: 1.
    * ``"edm"``: ``(σ² + σ_d²)/(σ·σ_d)²`` on the denoiser error (Karras et al. 2022, eq. 8 and
      Table 1). On an ``edm_f`` loss this is the unweighted F loss (``u = 1``): the EDM weight is
      then implied by ``c_out``.
    * ``"min_snr"``: diffusers' ``--snr_gamma`` (Hang et al. 2023): ``min(SNR, γ)/SNR`` on ε,
      ``min(SNR, γ)/(SNR + 1)`` on v, ``min(SNR, γ)`` on x0. Each equals ``w = min(SNR, γ)`` on x0.
      At SNR = 0 (σ = inf, a ``rescale_betas_zero_snr`` scheduler's last step) the weight is 1, as in
      diffusers' scripts (``mse_loss_weights[snr == 0] = 1``), where the formula is 0·inf.
    * ``"snr"``: ``SNR·c(σ)``, i.e. ``w = SNR = 1/σ²`` on x0 for every prediction type: diffusers'
      ``train_unconditional.py --prediction_type sample`` weights its x0 loss by ``ᾱ/(1 − ᾱ)`` (u = SNR on
      x0), which makes it the ε error (METHOD.md §4, the unweighted-ε row). 0 at σ = inf.
    * ``"sigma_sqrt"``: SD3's ``s⁻²`` (diffusers ``compute_loss_weighting_for_sd3``).
    * ``"cosmap"``: SD3's ``2/(π·(1 − 2s + 2s²))``.
    * a callable: ``f(sigmas) → u`` (VE σ in, weight on the user's own error out), same shape.
    """
    validate_loss_weighting(loss_weighting, snr_gamma)
    sigmas = torch.as_tensor(sigmas, dtype=torch.float64)
    if callable(loss_weighting):
        u = torch.as_tensor(loss_weighting(sigmas), dtype=torch.float64)
        if u.shape != sigmas.shape:
            raise ValueError(f"loss_weighting: the callable returned shape {tuple(u.shape)}, expected {tuple(sigmas.shape)}")
        return u
    if loss_weighting == "none":
        return torch.ones_like(sigmas)
    if loss_weighting == "edm":
        # (σ² + σ_d²)/(σ·σ_d)² written as 1/σ_d² + 1/σ²: finite (→ 1/σ_d²) at σ = inf
        lam = 1.0 / sigma_data**2 + 1.0 / sigmas**2
        # On F the EDM objective is unweighted; on x0/D it is λ(σ).
        # u = w·c so that the x0-space weight w = u/c is λ(σ) (on D/x0 itself c = 1, u = λ).
        if prediction_type == "edm_f":
            return torch.ones_like(sigmas)
        return lam * x0_error_factor(prediction_type, sigmas, sigma_data=sigma_data)
    if loss_weighting == "min_snr":
        snr = 1.0 / sigmas**2
        clipped = torch.minimum(snr, torch.full_like(snr, float(snr_gamma)))
        # Written as u = w·c so that the x0-space weight w = u/c is min(SNR, γ) for every prediction
        # type (ε: c = 1/SNR, u = min(SNR, γ)/SNR; v: c = 1/(SNR + 1), u = min(SNR, γ)/(SNR + 1)).
        u = clipped * x0_error_factor(prediction_type, sigmas, sigma_data=sigma_data)
        # diffusers' convention at zero SNR (a zero-terminal-SNR step, σ = inf): weight 1, not 0·inf
        return torch.where(snr == 0, torch.ones_like(u), u)
    if loss_weighting == "snr":
        # SNR·c: on x0 (c = 1) diffusers' snr_weights = ᾱ/(1 − ᾱ) = 1/σ²; at σ = inf, 0 (not 0·inf)
        c = x0_error_factor(prediction_type, sigmas, sigma_data=sigma_data)
        return torch.where(torch.isinf(sigmas), torch.zeros_like(c), c / sigmas**2)
    s = _flow_s(sigmas)
    if loss_weighting == "sigma_sqrt":
        return s ** (-2.0)
    # cosmap
    return 2.0 / (math.pi * (1.0 - 2.0 * s + 2.0 * s**2))


def x0_loss_weight(
    loss_weighting: LossWeighting,
    prediction_type: str,
    sigmas: torch.Tensor,
    *,
    snr_gamma: float | None = None,
    sigma_data: float = 0.5,
) -> torch.Tensor:
    """``w(σ) = u(σ)/c(σ)``: the weight the user's loss puts on the x0-space error (METHOD.md §4).

    Examples (hand-derived, tested): unweighted ε → ``1/σ²`` (= SNR), and so is ``"snr"`` on x0; unweighted v →
    ``(1 + σ²)/σ²``; unweighted flow velocity → ``((1 + σ)/σ)²``; EDM → ``(σ² + σ_d²)/(σ·σ_d)²``;
    Min-SNR-γ → ``min(SNR, γ)``; SD3 ``sigma_sqrt`` on velocity → ``s⁻⁴``.
    """
    u = loss_weight(loss_weighting, prediction_type, sigmas, snr_gamma=snr_gamma, sigma_data=sigma_data)
    return u / x0_error_factor(prediction_type, sigmas, sigma_data=sigma_data)
