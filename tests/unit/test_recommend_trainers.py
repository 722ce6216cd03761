"""Each trainer's sampling arithmetic, re-implemented here from its source and fed the row ``infonoise recommend``
prints (issue 48, docs/METHOD.md §6.1): the draws' quantiles against the fit, the draws' distribution against the one
the module reports (and scores) for that row, and no index past a table, also for fits whose tail reaches the edge.

The re-implementations follow the code at these commits, read through the library's snapshots (function, the lines
that draw a noise level):

* diffusers @ 58eb52c0: examples/dreambooth/train_dreambooth_lora_sd3.py (``u = compute_density_for_timestep_sampling
  (...)``, ``indices = (u * noise_scheduler_copy.config.num_train_timesteps).long()``, ``timesteps =
  noise_scheduler_copy.timesteps[indices]``, sigma = ``sigmas[step_index]``); src/diffusers/training_utils.py
  (``compute_density_for_timestep_sampling``: ``torch.normal(logit_mean, logit_std)``, ``sigmoid``); the scheduler
  itself is diffusers' FlowMatchEulerDiscreteScheduler (installed). examples/text_to_image/train_text_to_image_sdxl.py
  (``generate_timestep_weights``: ``weights[begin:end] *= multiplier``; ``torch.multinomial(weights, bsz)``).
* kohya-ss/sd-scripts @ 48d368fa: library/sd3_train_utils.py ``get_noisy_model_input_and_timesteps`` (``u = (u *
  shift) / (1 + (shift - 1) * u)``, ``indices = (u * (t_max - t_min) + t_min).long()``, ``sigmas = timesteps / 1000``);
  library/flux_train_utils.py ``get_noisy_model_input_and_timesteps`` (``shift``: ``randn * sigmoid_scale``,
  ``sigmoid``, shift; ``sigma``: ``indices = (u * num_timesteps).long()`` into its FlowMatchEulerDiscreteScheduler(shift
  = discrete_flow_shift) table); library/train_util.py ``get_timesteps`` (``torch.randint(min_timestep, max_timestep)``).
* bghira/SimpleTuner @ bc8e6ab7: simpletuner/helpers/models/common.py ``sample_flow_sigmas`` (``sigmoid(
  flow_sigmoid_scale * randn)`` or ``rand``, then ``apply_flow_schedule_shift``: ``(sigmas * shift) / (1 + (shift - 1)
  * sigmas)``); the VP draw ``torch.multinomial(weights, bsz)`` with ``--disable_segmented_timestep_sampling``.
* Nerogar/OneTrainer @ 23df3832: modules/modelSetup/mixin/ModelSetupNoiseMixin.py ``_get_timestep_discrete``
  (``min_timestep = int(N * min_noising_strength)``; LOGIT_NORMAL ``normal(bias, weight + 1).sigmoid() * num_timestep +
  min_timestep``; UNIFORM ``min + (max - min) * rand``; ``N * shift * t / ((shift - 1) * t + N)``; ``.int()``);
  ModelSetupFlowMatchingMixin.py (``sigma = arange(1, N + 1)[timestep] / N``: t = N is an IndexError).
* ostris/ai-toolkit @ 27a03a91: jobs/process/BaseSDTrainProcess.py (``max_noise_steps = min(max_noise_steps,
  num_train_timesteps - 1)``, ``torch.randint(min_idx, max_idx)``, ``timesteps = noise_scheduler.timesteps[indices]``);
  toolkit/samplers/custom_flowmatch_sampler.py (``linear``: ``linspace(1000, 1, num_timesteps)``; ``add_noise``: s =
  t/1000).
* kohya-ss/musubi-tuner @ 30c658c4: src/musubi_tuner/training/trainer_base.py ``get_noisy_model_input_and_timesteps``
  (``shift``: ``randn * sigmoid_scale``, ``sigmoid``, ``(t * shift) / (1 + (shift - 1) * t)``, then ``t * (t_max -
  t_min) + t_min`` with t_min, t_max = min/max_timestep/1000; ``uniform``: ``rand``).

Every draw is made in float32, as the trainers make it; ln σ = logit(s) on the flow path (METHOD.md §1).
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from diffusers import DDPMScheduler, FlowMatchEulerDiscreteScheduler

from diffusers_infonoise.diagnostics import log_sigma_grid, profile_from_errors, recommend_fixed_density, target_from_profile
from diffusers_infonoise.diagnostics import trainers as T
from diffusers_infonoise.diagnostics.recommend import fitted_parameters
from diffusers_infonoise.paths import path_from_scheduler

N = 1000
DRAWS = 100_000


def numbers(flags: str, name: str) -> float:
    return float(re.search(re.escape(name) + r"[\" :]+(-?[0-9.e+-]+)", flags).group(1))


def logit32(s: torch.Tensor) -> torch.Tensor:
    s = s.double()
    return torch.log(s) - torch.log1p(-s)


def target_of(scheduler, m, s, *, prediction_type="sample", num_levels=64, shape=None):
    """A profile whose π* = ρ̂/w under the unweighted ``prediction_type`` loss holds point values of N(m, s²) in ln σ
    (or of ``shape(x)``): ρ̂ ∝ shape·w, w = 1 for the x0 loss, ``(1 + σ)²/σ²`` for the flow velocity (METHOD.md §4)."""
    x = log_sigma_grid(path_from_scheduler(scheduler), num_levels)
    sig = torch.exp(x)
    q = torch.exp(-0.5 * ((x - m) / s) ** 2) if shape is None else shape(x)
    q = q * (((1 + sig) / sig) ** 2 if prediction_type == "flow" else 1.0)
    return target_from_profile(profile_from_errors(sig, sig**2 * q / q.max(), gate=None), scheduler, prediction_type=prediction_type)


def rows(target, trainer):
    return [r for r in recommend_fixed_density(target, trainers=trainer).trainers if "settings" in r]


def module_draws(target, trainer, scripts_start, family):
    """The :class:`Draws` the module reports for a row: its clamped fit through the setting's own build."""
    (scripts,) = [t for t in T.TRAINERS if t.trainer == trainer and t.scripts.startswith(scripts_start) and t.trains(target.path)]
    (setting,) = [s for s in scripts.settings if s.family == family]
    target = T._row_target(scripts, target)[0]  # fitted for the loss the scripts train
    params, _ = T._clamp(setting, target, fitted_parameters(target, family))
    return setting.build(params, target.path)[1]


def cdf_gap(sim: torch.Tensor, draws: T.Draws) -> float:
    """sup |F_sim − F_module| between consecutive levels (ties of float32 and float64 level values avoided), or at the
    simulated quantiles for a continuous density."""
    sim = sim.double()
    if draws.levels is not None:
        lev, p = draws.levels.double(), draws.probs.double()
        p = p / (p.sum() + draws.crash)
        fin = torch.sort(lev[torch.isfinite(lev)]).values
        pts = 0.5 * (fin[1:] + fin[:-1])
        model = (p[None, :] * (lev[None, :] <= pts[:, None])).sum(1)
    else:
        pts = torch.quantile(sim[torch.isfinite(sim)][:100_000], torch.linspace(0.01, 0.99, 99, dtype=torch.float64))
        model = draws.density.cdf(pts)
    emp = torch.searchsorted(torch.sort(sim).values, pts, right=True).double() / sim.numel()
    return float((emp - model).abs().max())


def quantiles(sim: torch.Tensor, qs=(0.1, 0.5, 0.9)) -> list[float]:
    return torch.quantile(sim.double()[:100_000], torch.tensor(qs, dtype=torch.float64)).tolist()


def normal_quantiles(m, s, qs=(0.1, 0.5, 0.9)) -> list[float]:
    return [m + s * math.sqrt(2) * float(torch.erfinv(torch.tensor(2 * q - 1, dtype=torch.float64))) for q in qs]


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(0)


# ----------------------------------------------------------------------------------------------
# diffusers' flow scripts: a table index that rounds up, IndexError at u = 1.0
# ----------------------------------------------------------------------------------------------


def diffusers_sd3(flags, table, gen, n=DRAWS):
    """train_dreambooth_lora_sd3.py: ln σ of each draw, and the number of indices past the table."""
    u = torch.sigmoid(torch.normal(numbers(flags, "--logit_mean"), numbers(flags, "--logit_std"), (n,), generator=gen))
    idx = (u * table.config.num_train_timesteps).long()
    past = int((idx >= len(table.sigmas)).sum())
    s = table.sigmas[idx.clamp(max=len(table.sigmas) - 1)]
    return logit32(s), past


def test_diffusers_sd3_row_draws_the_fit_through_diffusers_table(gen):
    sched = FlowMatchEulerDiscreteScheduler(shift=3.0)
    target = target_of(sched, -0.5, 0.8)
    fit = fitted_parameters(target, "logit_normal")
    (row, _) = rows(target, "diffusers")
    sim, past = diffusers_sd3(row["settings"][0]["flags"], FlowMatchEulerDiscreteScheduler(shift=3.0), gen)
    assert past == 0
    # quantiles of the draws: the fit's, within the table's rounding up (one level: < 0.01 here) and sampling error
    assert quantiles(sim) == pytest.approx(normal_quantiles(fit["mean"], fit["std"]), abs=0.02)
    assert cdf_gap(sim, module_draws(target, "diffusers", "train_dreambooth_lora_sd3", "logit_normal")) < 0.01


def test_diffusers_sd3_a_fit_reaching_the_clean_end_is_clamped_and_never_indexes_past_the_table(gen):
    """π* with 80% of its mass at ln σ −6.4 (the clean end) and 20% at +5.6 on the shift-1 path: the moment fit
    (mean about −4, std about 4.8) puts 0.6% of its draws beyond float32's sigmoid(z) = 1 (z ≥ 24 ln 2 → index 1000, an
    IndexError); the printed (clamped) row has none in 10⁶ draws, at most 5% beyond each end of the table, and the
    module scores exactly its draws."""
    sched = FlowMatchEulerDiscreteScheduler()
    target = target_of(sched, 0, 1, shape=lambda x: 4 * torch.exp(-0.5 * ((x + 6.4) / 0.3) ** 2) + torch.exp(-0.5 * ((x - 5.6) / 0.3) ** 2))
    m, s = fitted_parameters(target, "logit_normal").values()
    raw = f"--logit_mean {-m:.4g} --logit_std {s:.4g}"
    _, past_raw = diffusers_sd3(raw, FlowMatchEulerDiscreteScheduler(), gen, n=1_000_000)
    assert past_raw > 1000  # the unclamped fit crashes diffusers' script about once per 200 draws
    (row, _) = rows(target, "diffusers")
    setting = row["settings"][0]
    assert "clamped" in setting["warnings"][0] and setting["crash_probability"] < T.CRASH
    sim, past = diffusers_sd3(setting["flags"], FlowMatchEulerDiscreteScheduler(), gen, n=1_000_000)
    assert past == 0
    lo, hi = path_from_scheduler(sched).log_sigma_range
    assert float((sim < lo - 1e-6).double().mean()) == 0.0  # rounding up: nothing below the table's last entry
    assert float((sim > hi + 1e-6).double().mean()) < T.PILE_UP + 0.005  # index 0: s = 1, sigma = inf
    assert cdf_gap(sim[:DRAWS], module_draws(target, "diffusers", "train_dreambooth_lora_sd3", "logit_normal")) < 0.01


# ----------------------------------------------------------------------------------------------
# kohya-ss/sd-scripts
# ----------------------------------------------------------------------------------------------


def kohya_sd3(flags, gen, n=DRAWS):
    """library/sd3_train_utils.py get_noisy_model_input_and_timesteps: ln σ of t/1000 (t = 0: σ = 0, -inf)."""
    if "--weighting_scheme logit_normal" in flags:
        u = torch.sigmoid(torch.normal(numbers(flags, "--logit_mean"), numbers(flags, "--logit_std"), (n,), generator=gen))
    else:
        u = torch.rand(n, generator=gen)
    t_min = int(numbers(flags, "--min_timestep")) if "--min_timestep" in flags else 0
    t_max = int(numbers(flags, "--max_timestep")) if "--max_timestep" in flags else 1000
    shift = numbers(flags, "--training_shift")
    u = (u * shift) / (1 + (shift - 1) * u)
    t = (u * (t_max - t_min) + t_min).long()
    return logit32(t.float() / 1000)


@pytest.mark.parametrize("m, s", [(-0.5, 0.8), (-5.0, 2.0)], ids=["inside", "clean-end"])
def test_kohya_sd3_rows(m, s, gen):
    target = target_of(FlowMatchEulerDiscreteScheduler(), m, s)
    sd3 = next(r for r in rows(target, "kohya") if r["scripts"].startswith("sd3"))
    for setting in sd3["settings"]:
        sim = kohya_sd3(setting["flags"], gen)
        assert cdf_gap(sim, module_draws(target, "kohya", "sd3", setting["family"])) < 0.01, setting
        if setting["family"] != "timestep_range":
            assert float((sim == -math.inf).double().mean()) < T.PILE_UP + 0.005  # t = 0: sigma = 0
    if m == -0.5:
        fit = fitted_parameters(target, "logit_normal")
        ln = next(x for x in sd3["settings"] if x["family"] == "logit_normal")
        # truncation rounds ln σ down by at most a level (0.005 to 0.02 at these quantiles)
        assert quantiles(kohya_sd3(ln["flags"], gen)) == pytest.approx(normal_quantiles(fit["mean"], fit["std"]), abs=0.03)
    else:
        assert any("clamped" in w for x in sd3["settings"] for w in x["warnings"])


def kohya_flux(flags, gen, n=DRAWS):
    """library/flux_train_utils.py get_noisy_model_input_and_timesteps (``shift``, and ``sigma`` on the shift table)."""
    k = numbers(flags, "--discrete_flow_shift")
    if "--timestep_sampling shift" in flags:
        z = torch.randn(n, generator=gen) * numbers(flags, "--sigmoid_scale")
        u = z.sigmoid()
        return logit32((u * k) / (1 + (k - 1) * u))
    u = torch.rand(n, generator=gen)
    table = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=k)  # kohya's copy of the class: same table
    return logit32(table.sigmas[(u * 1000).long()])


def test_kohya_flux_rows_draw_the_fit_and_train_the_raw_velocity(gen):
    target = target_of(FlowMatchEulerDiscreteScheduler(), 0.5, 1.3, prediction_type="flow")
    flux = next(r for r in rows(target, "kohya") if r["scripts"].startswith("flux"))
    for setting in flux["settings"]:
        assert setting["flags"].endswith("--model_prediction_type raw")
        assert cdf_gap(kohya_flux(setting["flags"], gen), module_draws(target, "kohya", "flux", setting["family"])) < 0.01
    fit = fitted_parameters(target, "logit_normal")
    ln = next(x for x in flux["settings"] if x["family"] == "logit_normal")
    assert quantiles(kohya_flux(ln["flags"], gen)) == pytest.approx(normal_quantiles(fit["mean"], fit["std"]), abs=0.02)


def test_kohya_vp_range_is_randint_min_max(gen):
    sched = DDPMScheduler()
    target = target_of(sched, -1.0, 0.7, prediction_type="epsilon", num_levels=48)
    vp = rows(target, "kohya")[0]
    (setting,) = vp["settings"]
    lo, hi = int(numbers(setting["flags"], "--min_timestep")), int(numbers(setting["flags"], "--max_timestep"))
    t = torch.randint(lo, hi, (DRAWS,), generator=gen)  # library/train_util.py get_timesteps
    sim = torch.log(path_from_scheduler(sched).sigmas_table[t])
    assert cdf_gap(sim, module_draws(target, "kohya", "train_network", "timestep_range")) < 0.01
    fit = fitted_parameters(target, "timestep_range")
    assert (int(t.min()), int(t.max())) == (fit["t_min"], fit["t_max"])


# ----------------------------------------------------------------------------------------------
# SimpleTuner, diffusers' SDXL script
# ----------------------------------------------------------------------------------------------


def simpletuner_flow(flags, gen, n=DRAWS):
    k = numbers(flags, "--flow_schedule_shift")
    if "--flow_use_uniform_schedule" in flags:
        u = torch.rand(n, generator=gen)
    else:
        u = torch.sigmoid(numbers(flags, "--flow_sigmoid_scale") * torch.randn(n, generator=gen))
    return logit32((u * k) / (1 + (k - 1) * u))


def test_simpletuner_flow_rows(gen):
    target = target_of(FlowMatchEulerDiscreteScheduler(shift=3.0), -1.5, 1.1, prediction_type="flow")
    (flow,) = rows(target, "simpletuner")
    for setting in flow["settings"]:
        assert cdf_gap(simpletuner_flow(setting["flags"], gen), module_draws(target, "simpletuner", "every", setting["family"])) < 0.01
    fit = fitted_parameters(target, "logit_normal")
    ln = next(x for x in flow["settings"] if x["family"] == "logit_normal")
    assert quantiles(simpletuner_flow(ln["flags"], gen)) == pytest.approx(normal_quantiles(fit["mean"], fit["std"]), abs=0.02)


@pytest.mark.parametrize("trainer", ["diffusers", "simpletuner"])
def test_the_vp_timestep_bias_rows_put_99_percent_in_the_range(trainer, gen):
    """weights 1, ``weights[begin:end] *= multiplier``, ``torch.multinomial(weights, n, replacement=True)``;
    SimpleTuner's row disables its segmented sampling (one step per batch segment whatever the weights)."""
    sched = DDPMScheduler()
    target = target_of(sched, -1.0, 0.7, prediction_type="epsilon", num_levels=48)
    (setting,) = rows(target, trainer)[0]["settings"]
    assert ("--disable_segmented_timestep_sampling" in setting["flags"]) == (trainer == "simpletuner")
    begin, end = int(numbers(setting["flags"], "--timestep_bias_begin")), int(numbers(setting["flags"], "--timestep_bias_end"))
    weights = torch.ones(1000)
    weights[begin:end] *= numbers(setting["flags"], "--timestep_bias_multiplier")
    t = torch.multinomial(weights / weights.sum(), DRAWS, replacement=True, generator=gen)
    assert float(((t >= begin) & (t < end)).double().mean()) == pytest.approx(0.99, abs=0.005)
    sim = torch.log(path_from_scheduler(sched).sigmas_table[t])
    assert (
        cdf_gap(sim, module_draws(target, trainer, "train_text_to_image_sdxl" if trainer == "diffusers" else "SD", "timestep_range")) < 0.01
    )


# ----------------------------------------------------------------------------------------------
# OneTrainer: truncation plus one, float32 shift
# ----------------------------------------------------------------------------------------------


def onetrainer_flow(config: str, gen, n=DRAWS):
    """ModelSetupNoiseMixin._get_timestep_discrete and ModelSetupFlowMatchingMixin: ln σ of (t + 1)/N and the number of
    t = N (an IndexError into ``arange(1, N + 1) / N``)."""
    cfg = {k: v for k, v in re.findall(r'"(\w+)": "?([\w.+-]+)"?', config)}
    lo_t, hi_t = int(N * float(cfg.get("min_noising_strength", 0.0))), int(N * float(cfg.get("max_noising_strength", 1.0)))
    shift = float(cfg["timestep_shift"])
    if cfg["timestep_distribution"] == "LOGIT_NORMAL":
        z = torch.normal(float(cfg["noising_bias"]), float(cfg["noising_weight"]) + 1.0, (n,), generator=gen)
        t = z.sigmoid() * (hi_t - lo_t) + lo_t
    else:
        t = lo_t + (hi_t - lo_t) * torch.rand(n, generator=gen)
    t = (N * shift * t / ((shift - 1) * t + N)).int()
    past = int((t >= N).sum())
    sigma_table = torch.arange(1, N + 1, dtype=torch.int32) / N
    return logit32(sigma_table[t.clamp(max=N - 1)]), past


@pytest.mark.parametrize("m, s", [(0.3, 0.9), (5.0, 2.5)], ids=["inside", "noisy-end"])
def test_onetrainer_flow_rows(m, s, gen):
    target = target_of(FlowMatchEulerDiscreteScheduler(), m, s, prediction_type="flow")
    flow = rows(target, "onetrainer")[0]
    for setting in flow["settings"]:
        sim, past = onetrainer_flow(setting["flags"], gen)
        assert past == 0, setting
        assert cdf_gap(sim, module_draws(target, "onetrainer", "every", setting["family"])) < 0.01, setting
    if m == 0.3:
        fit = fitted_parameters(target, "logit_normal")
        ln = next(x for x in flow["settings"] if x["family"] == "logit_normal")
        assert quantiles(onetrainer_flow(ln["flags"], gen)[0]) == pytest.approx(normal_quantiles(fit["mean"], fit["std"]), abs=0.03)


def test_onetrainer_uniform_shift_never_indexes_past_its_table():
    """For a shift of 3, OneTrainer's float32 ``N·shift·t/((shift − 1)·t + N)`` of a uniform draw u = 1 − 2·2⁻²⁴ is
    exactly 1000.0 (an IndexError about once in 6 million draws): the row takes the nearest shift that has no such u.
    Checked here on every float32 u within 2¹⁴ grid steps of 1 (torch.rand's grid near 1)."""
    u = 1.0 - torch.arange(1, 1 << 14, dtype=torch.float32) * 2.0**-24
    t = u * N + 0

    def crashes(k):
        return bool(((N * k * t / ((k - 1) * t + N)).int() >= N).any())

    assert crashes(3.0)
    target = target_of(FlowMatchEulerDiscreteScheduler(), 1.1, 1.0, prediction_type="flow")  # the fitted shift is about 3
    (setting,) = [x for x in rows(target, "onetrainer")[0]["settings"] if x["family"] == "shift_uniform"]
    k = numbers(setting["flags"], "timestep_shift")
    assert not crashes(k) and setting["crash_probability"] == 0.0
    assert abs(math.log(k) - math.log(fitted_parameters(target, "shift_uniform")["shift"])) < 0.05
    assert k != T._round(fitted_parameters(target, "shift_uniform")["shift"])  # 3.004 crashes: moved to a neighbour
    assert "past its table" in " ".join(setting["warnings"])


def test_onetrainer_uniform_shift_is_dropped_where_no_shift_near_the_fit_avoids_the_crash():
    """Near a shift of 5 every 4-digit shift within 1% crashes (checked here on the float32 grid of u near 1, as above);
    the nearest that does not was 4.094, 18% away, a density elsewhere than the fit: no row, and the reason given."""
    u = 1.0 - torch.arange(1, 1 << 14, dtype=torch.float32) * 2.0**-24
    t = u * N
    assert all(bool(((N * k * t / ((k - 1) * t + N)).int() >= N).any()) for k in (round(4.95 + i * 0.001, 3) for i in range(101)))
    with pytest.raises(T.Unrepresentable, match="no timestep_shift within 1% of the fit 5 "):
        T._onetrainer_uniform_shift(5.0)
    target = target_of(FlowMatchEulerDiscreteScheduler(), math.log(5.0), 1.0, prediction_type="flow")
    flow = rows(target, "onetrainer")[0]
    fitted = fitted_parameters(target, "shift_uniform")["shift"]
    assert T._round(fitted) == 5.0  # the logistic fit of a logistic's location ln 5 (its draw density)
    assert not [x for x in flow["settings"] if x["family"] == "shift_uniform"]
    assert any(line.startswith("shift_uniform: no timestep_shift within 1%") for line in flow["dropped"]), flow["dropped"]


def test_onetrainer_vp_range(gen):
    sched = DDPMScheduler()
    target = target_of(sched, -1.0, 0.7, prediction_type="epsilon", num_levels=48)
    (setting,) = rows(target, "onetrainer")[0]["settings"]
    lo, hi = (int(N * numbers(setting["flags"], f'"{k}_noising_strength"')) for k in ("min", "max"))
    t = (lo + (hi - lo) * torch.rand(DRAWS, generator=gen)).int()
    sim = torch.log(path_from_scheduler(sched).sigmas_table[t.long()])
    assert cdf_gap(sim, module_draws(target, "onetrainer", "SD", "timestep_range")) < 0.01
    fit = fitted_parameters(target, "timestep_range")
    assert (int(t.min()), int(t.max())) == (fit["t_min"], fit["t_max"])


# ----------------------------------------------------------------------------------------------
# ai-toolkit, musubi-tuner, this package
# ----------------------------------------------------------------------------------------------


def ai_toolkit_linear(flags, gen, n=DRAWS):
    lo = int(numbers(flags, "min_denoising_steps")) if "min_denoising_steps" in flags else 0
    hi = int(numbers(flags, "max_denoising_steps")) if "max_denoising_steps" in flags else 999
    lo, hi = max(lo, 0), min(hi, N - 1)  # "clip min max indicies"
    timesteps = torch.linspace(1000, 1, N)
    idx = torch.randint(lo, hi, (n,), generator=gen)
    return logit32(timesteps[idx] / 1000), idx


@pytest.mark.parametrize("m, s", [(0.2, 1.0), (-5.5, 1.5)], ids=["inside", "clean-end"])
def test_ai_toolkit_rows(m, s, gen):
    target = target_of(FlowMatchEulerDiscreteScheduler(), m, s, prediction_type="flow")
    flow = rows(target, "ai-toolkit")[0]
    assert "timestep_type: sigmoid: the default itself" in flow["dropped"]
    for setting in flow["settings"]:
        sim, idx = ai_toolkit_linear(setting["flags"], gen)
        assert int(idx.max()) <= N - 2 and int(idx.min()) >= 0  # randint(min, 999) never reaches the table's end
        family = setting["family"]
        if family is None:
            continue
        assert cdf_gap(sim, module_draws(target, "ai-toolkit", "flow", family)) < 0.01
        assert float((sim == math.inf).double().mean()) == 0.0  # index 0 (s = 1) left out of the range


def musubi(flags, gen, n=DRAWS):
    t_min = numbers(flags, "--min_timestep") / 1000 if "--min_timestep" in flags else 0.0
    t_max = numbers(flags, "--max_timestep") / 1000 if "--max_timestep" in flags else 1.0
    if "--timestep_sampling shift" in flags:
        k = numbers(flags, "--discrete_flow_shift")
        t = (torch.randn(n, generator=gen) * numbers(flags, "--sigmoid_scale")).sigmoid()
        t = (t * k) / (1 + (k - 1) * t)
    else:
        t = torch.rand(n, generator=gen)
    return logit32(t * (t_max - t_min) + t_min)


def test_musubi_tuner_rows_use_sd_scripts_flux_flags(gen):
    target = target_of(FlowMatchEulerDiscreteScheduler(), -0.8, 1.2, prediction_type="flow")
    (flow,) = rows(target, "musubi-tuner")
    families = {x["family"] for x in flow["settings"]}
    assert families == {"logit_normal", "shift_logit_normal", "timestep_range"}
    for setting in flow["settings"]:
        assert cdf_gap(musubi(setting["flags"], gen), module_draws(target, "musubi-tuner", "wan", setting["family"])) < 0.01
    fit = fitted_parameters(target, "logit_normal")
    ln = next(x for x in flow["settings"] if x["family"] == "logit_normal")
    assert quantiles(musubi(ln["flags"], gen)) == pytest.approx(normal_quantiles(fit["mean"], fit["std"]), abs=0.02)
    assert "--timestep_sampling sigma" in flow["default"]["flags"]


def test_this_packages_row_is_what_its_sampler_draws(gen):
    """The training scripts' --noise_sampler logit_normal --logit_mean (diffusers' sign) --logit_std, through the
    package's own conversion (objective.diffusers_density_params) and sampler."""
    from diffusers_infonoise import make_sampler
    from diffusers_infonoise.objective import diffusers_density_params

    sched = FlowMatchEulerDiscreteScheduler(shift=3.0)
    target = target_of(sched, 0.4, 0.9, prediction_type="flow")
    (setting,) = rows(target, "diffusers-infonoise")[0]["settings"]
    params = diffusers_density_params(
        "logit_normal", logit_mean=numbers(setting["flags"], "--logit_mean"), logit_std=numbers(setting["flags"], "--logit_std")
    )
    sampler = make_sampler("logit_normal", sched, **params)
    sim = torch.log(sampler.sample(DRAWS, generator=gen).sigmas.double())
    assert cdf_gap(sim, module_draws(target, "diffusers-infonoise", "train_unconditional", "logit_normal")) < 0.01
    fit = fitted_parameters(target, "logit_normal")
    assert quantiles(sim) == pytest.approx(normal_quantiles(fit["mean"], fit["std"]), abs=0.02)


# ----------------------------------------------------------------------------------------------
# What is a recommendation: a TV gain over the default, a noisier loss by a margin, the trainer's own range
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("d, kept", [(0.01, False), (0.06, True)])
def test_a_row_within_min_tv_gain_of_the_default_is_not_a_recommendation(d, kept):
    """SimpleTuner's default draws N(ln 3, 1) in ln σ (no table); π* = N(ln 3 + d, 1) under its velocity loss. The
    shift_logit_normal row is N(ln 3 + d, 1) itself (TV ≈ 0), the default's TV is that of two unit normals d apart,
    2Φ(d/2) − 1: 0.004 for d = 0.01 (below MIN_TV_GAIN: dropped, with both TVs) and 0.024 for d = 0.06 (kept)."""
    target = target_of(FlowMatchEulerDiscreteScheduler(), math.log(3.0) + d, 1.0, prediction_type="flow", num_levels=256)
    (row,) = rows(target, "simpletuner")
    tv_default = 2 * float(torch.special.ndtr(torch.tensor(d / 2, dtype=torch.float64))) - 1
    assert row["default"]["tv"] == pytest.approx(tv_default, abs=2e-3)
    families = [x["family"] for x in row["settings"]]
    assert ("shift_logit_normal" in families) == kept
    if not kept:
        (line,) = [x for x in row["dropped"] if x.startswith("shift_logit_normal")]
        assert "the default already fits as well (TV " in line and f"a row must be {T.MIN_TV_GAIN} lower" in line
    # shift_uniform (a logistic) is farther from π* than the default: never a row
    assert "shift_uniform" not in families and any(x.startswith("shift_uniform: the default already fits") for x in row["dropped"])


def test_the_n_eff_warning_needs_the_margin_and_prints_the_difference():
    """n_eff 0.97x vs the default's 1.0x (3% below): no warning; 0.94x (6%): a warning whose two numbers differ as
    printed; 0.4x: below half, the loss 2.5x noisier."""
    from types import SimpleNamespace

    def warn(a, b):
        fig = {"n_eff_per_batch": a, "_masses": (torch.zeros(3, dtype=torch.float64), 0.0, 0.0), "crash_probability": 0.0}
        return T._warnings(fig, {"n_eff_per_batch": b}, SimpleNamespace(model_error=None))

    assert warn(0.97, 1.0) == [] and warn(0.999, 1.0) == []
    (w,) = warn(0.94, 1.0)
    assert "n_eff 0.94x batch, 6.0% below the default's 1x" == w
    (w,) = warn(0.946, 1.0)  # 5.4% below: not "5% below" under a threshold of more than 5%
    assert "5.4% below the default's" in w
    (w,) = warn(0.998, 1.06)
    a, b = re.findall(r"[0-9.]+(?=x)", w)
    assert a != b
    (w,) = warn(0.4, 1.0)
    assert "below half" in w and "2.5x noisier" in w


@pytest.mark.parametrize("side", ["hi", "lo"])
@pytest.mark.parametrize("var", [1e-10, 1e-6, 1e-2])
def test_a_very_narrow_fit_against_a_crash_limit_stays_inside_once_printed(side, var):
    """π* with moments (B ∓ 1e-4, var) beside a crash limit at B = ±24 ln 2 (float32's sigmoid(z) = 1 above it): the
    clamp, then the 4 significant digits the flags print. Without a margin for the printing, std 1e-5 and a mean
    16.6353 print as 16.64, past B: every draw would crash. The printed normal's own tail beyond B, from its CDF
    (erfc), is below CRASH."""
    b = 24 * math.log(2) * (1 if side == "hi" else -1)
    bounds = T.Bounds(-30.0, 30.0, crash_hi=b) if side == "hi" else T.Bounds(-30.0, 30.0, crash_lo=b)
    mu = b - 1e-4 if side == "hi" else b + 1e-4
    m, s = T._clamped_normal(mu, var, bounds)
    m, s = float(f"{m:.4g}"), float(f"{s:.4g}")  # what the flags print
    z = (b - m) / s if side == "hi" else (m - b) / s
    assert z > 0 and 0.5 * math.erfc(z / math.sqrt(2)) < T.CRASH


def test_the_clamp_names_the_trainers_range_and_the_grid_apart():
    """A profile on ln σ in [−3, 3] (cells to ±3 ± h/2) with π* = N(−2.5, 1.5²): 37% of the moment fit lies below the
    grid, so diffusers' SD3 row is clamped. Its trainer (shift-1 table, s in [1/1000, 999/1000]) represents VE σ
    1/999..999; the grid, not the trainer, is what stops the fit at σ = e^(−3 − h/2)."""
    sched = FlowMatchEulerDiscreteScheduler()
    x = torch.linspace(-3.0, 3.0, 64, dtype=torch.float64)
    h = float(x[1] - x[0])
    sig = torch.exp(x)
    q = torch.exp(-0.5 * ((x + 2.5) / 1.5) ** 2)
    target = target_from_profile(profile_from_errors(sig, sig**2 * q / q.max(), gate=None), sched, prediction_type="sample")
    row = next(r for r in rows(target, "diffusers") if r["scripts"].startswith("train_dreambooth_lora_sd3"))
    (setting,) = [x for x in row["settings"] if x["clamped"]]
    said = setting["clamped"]
    assert f"the trainer represents VE sigma {1 / 999:.3g}..{999:.3g}" in said
    assert f"rho_hat's grid has no level below VE sigma {math.exp(-3.0 - h / 2):.3g}" in said


def test_each_trainer_row_is_fitted_for_its_own_loss_and_diffusers_flux_draws_its_unshifted_table():
    """A dynamic-shift (Flux) scheduler with mu = 1: diffusers' scripts index its own table, which is unshifted, so
    --logit_mean = ln 1 − m = −m (METHOD.md §6.1: ln k₀ − m with k₀ = 1), not 1 − m, and the row says so. kohya's SD3
    row (x0 loss only) of the velocity-loss target carries the note naming both losses."""
    flux = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, shift=3.0)
    path = path_from_scheduler(flux, mu=1.0)
    x = log_sigma_grid(path, 64)
    sig = torch.exp(x)
    q = torch.exp(-0.5 * ((x - 0.8) / 0.9) ** 2) * ((1 + sig) / sig) ** 2
    target = target_from_profile(profile_from_errors(sig, sig**2 * q / q.max(), gate=None), flux, prediction_type="flow", mu=1.0)
    m = fitted_parameters(target, "logit_normal")["mean"]
    for row in rows(target, "diffusers"):
        assert any("unshifted for a use_dynamic_shifting scheduler" in n for n in row["notes"])
        (ln,) = [x for x in row["settings"] if x["family"] == "logit_normal"]
        assert numbers(ln["flags"], "--logit_mean") == pytest.approx(-m, abs=1e-3)
    sd3 = next(r for r in rows(target, "kohya") if r["scripts"].startswith("sd3"))
    assert "prediction_type sample" in sd3["notes"][0] and "prediction_type flow" in sd3["notes"][0]
