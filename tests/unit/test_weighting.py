"""Loss parameterizations and loss weights on the x0 error (METHOD.md §3-4).

References: Bayes-optimal predictors on Gaussian data built by hand from the linear posterior mean,
diffusers' own ``compute_snr``/``compute_loss_weighting_for_sd3``/``get_velocity``/``precondition_outputs``,
and the closed forms of METHOD.md §4 written out below.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from diffusers import DDPMScheduler, EDMEulerScheduler
from diffusers.training_utils import compute_loss_weighting_for_sd3, compute_snr

from diffusers_infonoise import x0_error_factor, x0_loss_weight
from diffusers_infonoise.weighting import loss_weight

from helpers.reference import edm_c_out, edm_lambda, flow_s, gauss_mmse

F64 = torch.float64
S_D = 0.8  # data std, deliberately different from EDM's σ_data = 0.5
SIGMA_DATA = 0.5
SIGMAS = [0.03, 0.2, 0.7, 1.5, 6.0, 40.0]
N = 100_000  # per σ; relative standard error of a mean of squared Gaussians: sqrt(2/N) ≈ 0.45 %


def _coefficients(path: str, sigma: float):
    """(a, b) of x = a·x0 + b·ε for the VE-equivalent σ (METHOD.md §1)."""
    if path == "ve":
        return 1.0, sigma
    if path == "vp":
        return 1 / math.sqrt(1 + sigma**2), sigma / math.sqrt(1 + sigma**2)  # sqrt(ᾱ), sqrt(1 − ᾱ)
    s = sigma / (1 + sigma)
    return 1 - s, s


CASES = [
    ("ve", "sample"),
    ("ve", "edm_f"),
    ("ve", "epsilon"),
    ("vp", "epsilon"),
    ("vp", "v_prediction"),
    ("vp", "sample"),
    ("flow", "flow"),
    ("flow", "sample"),
]


@pytest.mark.parametrize("path,prediction_type", CASES)
def test_bayes_optimal_errors_convert_to_analytic_mmse(path, prediction_type):
    gen = torch.Generator().manual_seed(CASES.index((path, prediction_type)))
    edm = EDMEulerScheduler(sigma_data=SIGMA_DATA)  # prediction_type "epsilon": c_out = σσ_d/sqrt(σ² + σ_d²)
    for sigma in SIGMAS:
        a, b = _coefficients(path, sigma)
        x0 = S_D * torch.randn(N, generator=gen, dtype=F64)
        eps = torch.randn(N, generator=gen, dtype=F64)
        x = a * x0 + b * eps
        x0_hat = (a * S_D**2 / (a**2 * S_D**2 + b**2)) * x  # E[x0 | x] for Gaussian x0
        eps_hat = (x - a * x0_hat) / b  # E[ε | x]
        if prediction_type == "sample":
            err = (x0_hat - x0) ** 2
        elif prediction_type == "epsilon":
            err = (eps_hat - eps) ** 2
        elif prediction_type == "v_prediction":
            # v = a·ε − b·x0 (diffusers' get_velocity); check our target against it on a table step
            err = ((a * eps_hat - b * x0_hat) - (a * eps - b * x0)) ** 2
        elif prediction_type == "flow":
            err = ((eps_hat - x0_hat) - (eps - x0)) ** 2  # velocity ε − x0
        else:  # edm_f: D = c_skip·x + c_out·F
            c_skip = SIGMA_DATA**2 / (sigma**2 + SIGMA_DATA**2)
            c_out = float(edm_c_out(sigma, SIGMA_DATA))
            f_hat, f = (x0_hat - c_skip * x) / c_out, (x0 - c_skip * x) / c_out
            # diffusers' own preconditioning turns our F̂ back into the posterior mean
            d = edm.precondition_outputs(x[:64], f_hat[:64], torch.tensor(sigma, dtype=F64))
            torch.testing.assert_close(d, x0_hat[:64], rtol=1e-10, atol=1e-10)
            err = (f_hat - f) ** 2
        c = float(x0_error_factor(prediction_type, torch.tensor(sigma, dtype=F64), sigma_data=SIGMA_DATA))
        mmse = float(gauss_mmse(sigma, S_D))
        got = c * float(err.mean())
        rel_se = math.sqrt(2.0 / N)
        assert got == pytest.approx(mmse, rel=5 * rel_se), (sigma, got, mmse)


def test_v_target_matches_diffusers_get_velocity():
    sched = DDPMScheduler(beta_schedule="squaredcos_cap_v2")
    t = torch.tensor([0, 10, 300, 700, 999])
    x0, eps = torch.randn(5, 3, dtype=F64), torch.randn(5, 3, dtype=F64)
    v = sched.get_velocity(x0, eps, t)
    ac = sched.alphas_cumprod.double()[t]
    sig = torch.sqrt((1 - ac) / ac)
    a, b = (1 / torch.sqrt(1 + sig**2))[:, None], (sig / torch.sqrt(1 + sig**2))[:, None]
    torch.testing.assert_close(v, a * eps - b * x0, rtol=1e-5, atol=1e-6)
    # and the conversion factor b² is the v row of METHOD.md §3
    torch.testing.assert_close(x0_error_factor("v_prediction", sig), (b**2).flatten(), rtol=1e-12, atol=0)


# ----------------------------------------------------------------------------------------------
# every row of METHOD.md §4, against hand formulas and diffusers' own weighting code
# ----------------------------------------------------------------------------------------------

SIG = torch.tensor([0.004, 0.05, 0.3, 1.0, 2.5, 17.0, 300.0], dtype=F64)
S = SIG / (1 + SIG)


def _hand_rows():
    sig, s, sd = SIG, S, SIGMA_DATA
    lam = (sig**2 + sd**2) / (sig * sd) ** 2
    return [
        # (loss_weighting, prediction_type, snr_gamma, u on own error, w on x0 error)
        ("none", "sample", None, torch.ones_like(sig), torch.ones_like(sig)),
        ("none", "epsilon", None, torch.ones_like(sig), 1 / sig**2),
        ("none", "v_prediction", None, torch.ones_like(sig), (1 + sig**2) / sig**2),
        ("none", "flow", None, torch.ones_like(sig), ((1 + sig) / sig) ** 2),
        ("none", "edm_f", None, torch.ones_like(sig), lam),
        ("edm", "sample", None, lam, lam),
        ("edm", "edm_f", None, torch.ones_like(sig), lam),
        ("edm", "epsilon", None, lam * sig**2, lam),
        # diffusers' train_unconditional x0 loss: snr_weights = ᾱ/(1 − ᾱ) = 1/σ² on x0 (the ε error)
        ("snr", "sample", None, 1 / sig**2, 1 / sig**2),
        ("snr", "epsilon", None, torch.ones_like(sig), 1 / sig**2),
        ("sigma_sqrt", "flow", None, s**-2, s**-2 * s**-2),
        ("sigma_sqrt", "sample", None, s**-2, s**-2),
        ("cosmap", "flow", None, 2 / (math.pi * (1 - 2 * s + 2 * s**2)), 2 / (math.pi * (1 - 2 * s + 2 * s**2)) * s**-2),
    ]


@pytest.mark.parametrize("row", _hand_rows(), ids=lambda r: f"{r[0]}-{r[1]}")
def test_loss_weight_rows_by_hand(row):
    weighting, pred, gamma, u, w = row
    torch.testing.assert_close(loss_weight(weighting, pred, SIG, snr_gamma=gamma, sigma_data=SIGMA_DATA), u, rtol=1e-12, atol=0)
    torch.testing.assert_close(x0_loss_weight(weighting, pred, SIG, snr_gamma=gamma, sigma_data=SIGMA_DATA), w, rtol=1e-12, atol=0)


def test_edm_weight_equals_inverse_c_out_squared():
    # EDM's λ(σ) = 1/c_out²: an unweighted F loss already is the EDM-weighted D loss
    w = x0_loss_weight("edm", "sample", SIG, sigma_data=SIGMA_DATA).numpy()
    np.testing.assert_allclose(w, 1 / edm_c_out(SIG.numpy(), SIGMA_DATA) ** 2, rtol=1e-12)
    np.testing.assert_allclose(w, edm_lambda(SIG.numpy(), SIGMA_DATA), rtol=1e-12)


@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction", "sample"])
@pytest.mark.parametrize("gamma", [1.0, 5.0])
def test_min_snr_matches_diffusers_scripts(prediction_type, gamma):
    """diffusers' train_text_to_image --snr_gamma: min(SNR, γ)/SNR on ε, /(SNR + 1) on v, as is on x0."""
    sched = DDPMScheduler()
    t = torch.tensor([0, 5, 50, 200, 400, 600, 999])
    snr = compute_snr(sched, t).double()
    script = torch.minimum(snr, torch.full_like(snr, gamma))
    if prediction_type == "epsilon":
        script = script / snr
    elif prediction_type == "v_prediction":
        script = script / (snr + 1)
    ac = sched.alphas_cumprod.double()[t]
    sig = torch.sqrt((1 - ac) / ac)
    torch.testing.assert_close(loss_weight("min_snr", prediction_type, sig, snr_gamma=gamma), script, rtol=1e-5, atol=0)
    # the x0-space weight is min(SNR, γ) for every parameterization
    w = x0_loss_weight("min_snr", prediction_type, sig, snr_gamma=gamma)
    torch.testing.assert_close(w, torch.minimum(1 / sig**2, torch.full_like(sig, gamma)), rtol=1e-12, atol=0)


@pytest.mark.parametrize("scheme", ["sigma_sqrt", "cosmap"])
def test_sd3_weightings_match_diffusers(scheme):
    u_ref = compute_loss_weighting_for_sd3(scheme, S).double()
    torch.testing.assert_close(loss_weight(scheme, "flow", SIG), u_ref, rtol=1e-6, atol=0)
    torch.testing.assert_close(x0_loss_weight(scheme, "flow", SIG), u_ref / S**2, rtol=1e-6, atol=0)


def test_callable_weighting_and_unweighted_ratios():
    f = lambda sig: 1.0 / (1.0 + sig)  # noqa: E731
    for pred, c in (("epsilon", SIG**2), ("v_prediction", SIG**2 / (1 + SIG**2)), ("flow", S**2), ("sample", torch.ones_like(SIG))):
        torch.testing.assert_close(loss_weight(f, pred, SIG), f(SIG), rtol=1e-14, atol=0)
        torch.testing.assert_close(x0_loss_weight(f, pred, SIG), f(SIG) / c, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="loss_weighting"):
        loss_weight(lambda sig: torch.ones(3), "sample", SIG)


def test_conversion_factors_by_hand():
    sig = SIG
    torch.testing.assert_close(x0_error_factor("sample", sig), torch.ones_like(sig))
    torch.testing.assert_close(x0_error_factor("epsilon", sig), sig**2, rtol=1e-14, atol=0)
    torch.testing.assert_close(x0_error_factor("v_prediction", sig), sig**2 / (1 + sig**2), rtol=1e-13, atol=0)
    torch.testing.assert_close(x0_error_factor("flow", sig), (sig / (1 + sig)) ** 2, rtol=1e-13, atol=0)
    torch.testing.assert_close(
        x0_error_factor("edm_f", sig, sigma_data=0.7), torch.from_numpy(edm_c_out(sig.numpy(), 0.7) ** 2), rtol=1e-13, atol=0
    )
    # σ = inf: an ε error carries no x0 information (inf); v and flow factors tend to 1
    inf = torch.tensor([math.inf], dtype=F64)
    assert math.isinf(float(x0_error_factor("epsilon", inf)))
    assert float(x0_error_factor("v_prediction", inf)) == 1.0
    assert float(x0_error_factor("flow", inf)) == 1.0
    assert float(flow_s(np.float64(3.0))) == 0.75


@pytest.mark.parametrize(
    "call,exc,name",
    [
        (lambda: x0_error_factor("eps", SIG), ValueError, "prediction_type"),
        (lambda: x0_loss_weight("p2", "epsilon", SIG), ValueError, "loss_weighting"),
        (lambda: x0_loss_weight(3, "epsilon", SIG), TypeError, "loss_weighting"),
        (lambda: x0_loss_weight("min_snr", "epsilon", SIG), ValueError, "snr_gamma"),
        (lambda: x0_loss_weight("min_snr", "epsilon", SIG, snr_gamma=-1.0), ValueError, "snr_gamma"),
        (lambda: x0_loss_weight("none", "epsilon", SIG, snr_gamma=5.0), ValueError, "snr_gamma"),
    ],
)
def test_bad_names_raise_naming_the_argument(call, exc, name):
    with pytest.raises(exc, match=name) as info:
        call()
    if exc is ValueError and name in ("prediction_type", "loss_weighting"):
        assert "accepted" in str(info.value)


def test_zero_terminal_snr_weights_are_finite():
    """σ = inf (the last step of a rescale_betas_zero_snr scheduler): Min-SNR's min(SNR, γ)·σ² is 0·inf;
    diffusers' scripts set that weight to 1 (mse_loss_weights[snr == 0] = 1), and EDM's λ(σ) tends to
    1/σ_d² (by hand: 4 for σ_d = 0.5)."""
    from diffusers_infonoise.weighting import loss_weight

    sig = torch.tensor([0.5, math.inf], dtype=torch.float64)
    for pred in ("epsilon", "v_prediction", "sample"):
        u = loss_weight("min_snr", pred, sig, snr_gamma=5.0)
        assert torch.isfinite(u).all() and u[1] == 1.0, (pred, u)
    lam = loss_weight("edm", "sample", sig, sigma_data=0.5)
    assert lam[1] == pytest.approx(4.0) and lam[0] == pytest.approx((0.25 + 0.25) / (0.5 * 0.5) ** 2)


def test_zero_snr_scheduler_trains_on_finite_weighted_losses():
    from diffusers import DDPMScheduler

    from diffusers_infonoise import make_sampler
    from diffusers_infonoise.training import weighted_loss

    sched = DDPMScheduler(rescale_betas_zero_snr=True, prediction_type="v_prediction")
    for weighting, gamma in (("min_snr", 5.0), ("none", None)):
        s = make_sampler("uniform", sched, loss_weighting=weighting, snr_gamma=gamma)
        levels = s.sample(4000, generator=torch.Generator().manual_seed(0))
        assert bool(torch.isinf(levels.sigmas).any())  # the σ = inf step is drawn
        assert torch.isfinite(weighted_loss(s, levels, torch.ones(4000)))


@pytest.mark.parametrize("scheduler,weighting", [("ddpm", "cosmap"), ("ddpm", "sigma_sqrt"), ("edm", "cosmap"), ("flow", "edm")])
def test_weightings_that_mean_nothing_on_a_path_are_refused(scheduler, weighting):
    from diffusers import DDPMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

    from diffusers_infonoise import make_sampler

    sched = {"ddpm": DDPMScheduler, "edm": EDMEulerScheduler, "flow": FlowMatchEulerDiscreteScheduler}[scheduler]()
    with pytest.raises(ValueError, match=f"loss_weighting: '{weighting}' is defined on the"):
        make_sampler("infonoise", sched, loss_weighting=weighting)


def test_a_weighting_that_is_infinite_on_the_path_is_refused_at_construction():
    """EDM's λ(σ) on an ε loss is λ·σ², infinite at the σ = inf step of a zero-terminal-SNR DDPM scheduler
    (issue 20: an infinite weight reached the loss). Min-SNR and diffusers' SNR-weighted x0 loss stay finite
    there (1 and 0, by hand)."""
    from diffusers import DDPMScheduler

    from diffusers_infonoise import make_sampler
    from diffusers_infonoise.weighting import loss_weight

    sched = DDPMScheduler(rescale_betas_zero_snr=True)
    with pytest.raises(
        ValueError,
        match=r"loss_weighting: 'edm' on a 'epsilon' loss is infinite at the "
        r"zero-terminal-SNR step \(sigma = inf",
    ):
        make_sampler("infonoise", sched, prediction_type="epsilon", loss_weighting="edm")
    with pytest.raises(ValueError, match="loss_weighting: 'edm'"):
        make_sampler("uniform", sched, prediction_type="epsilon", loss_weighting="edm")
    make_sampler("infonoise", sched, prediction_type="epsilon", loss_weighting="min_snr", snr_gamma=5.0)
    make_sampler("infonoise", sched, prediction_type="sample", loss_weighting="snr")
    assert float(loss_weight("snr", "sample", torch.tensor([math.inf], dtype=torch.float64))) == 0.0
