"""Offline diagnostics: where a training-noise schedule spends compute (METHOD.md §2-§6).

The paper's diagnostic compares two densities on one axis, ``log σ`` (VE σ; METHOD.md §1):

* the **entropy-rate profile** ``ρ̂(log σ) ∝ gate(σ)·mmse(σ)/σ²`` (§2, §5.5), measured on a frozen
  model (:func:`profile_from_model`), on a finite data set through its optimal empirical denoiser
  (:func:`profile_from_dataset`), or known in closed form (:func:`analytic_mmse_gaussian`,
  :func:`analytic_mmse_two_point`);
* the **effective allocation** ``φ = π·w`` of a schedule (§4): how much weighted training signal each
  noise level gets (:func:`allocation`). InfoNoise sets ``π ∝ ρ̂/w`` so that ``φ ∝ ρ̂``.

Mass of φ outside ρ̂'s window is wasted compute (§6); :func:`window_mass`, :func:`total_variation`
and :func:`wasted_mass` turn that into numbers. :func:`plot_schedule`, :func:`plot_level_histogram`
and :func:`plot_profile` draw it (matplotlib's Agg canvas through :class:`matplotlib.figure.Figure`,
never a display; callers save the returned figures, or pass ``path=``).

Conventions: every ``log_sigma`` / ``sigmas`` here is the VE noise level (natural log), float64,
increasing. Densities are **per unit log σ** and normalised on the grid they are given on: each
grid point is the centre of a cell whose edges are the midpoints to its neighbours
(:func:`grid_edges`); on a uniform grid of K points these are exactly the K bins of
:class:`~diffusers_infonoise.estimator.ProfileEstimator`. ``mmse`` values are per element (the mean
over the elements of one sample): a constant factor cancels in every normalised quantity (§3).

Modules: :mod:`.grid` (grids, normalisation, the result types), :mod:`.profiles`, :mod:`.empirical`,
:mod:`.allocations`, :mod:`.plotting`, :mod:`.recommend` (the fixed density of each family that is closest to the draw
density π* = ρ̂/w, in closed form; METHOD.md §6.1) and :mod:`.trainers` (the flags that set it in each trainer, and
the draws they really give).

matplotlib and tqdm are optional dependencies (extras ``train`` / ``benchmarks``): they are imported only by the
functions that need them.
"""

from __future__ import annotations

from . import allocations, empirical, grid, plotting, profiles, recommend, trainers
from .allocations import *  # noqa: F401,F403
from .empirical import *  # noqa: F401,F403
from .grid import *  # noqa: F401,F403
from .plotting import *  # noqa: F401,F403
from .profiles import *  # noqa: F401,F403
from .recommend import *  # noqa: F401,F403
from .trainers import *  # noqa: F401,F403

__all__ = [
    *grid.__all__,
    *profiles.__all__,
    *empirical.__all__,
    *allocations.__all__,
    *plotting.__all__,
    *recommend.__all__,
    *trainers.__all__,
]
