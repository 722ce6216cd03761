"""Stored starts for a fine-tune race built from an offline profile of the pretrained model (issue 31's start).

For each named race of a quality-race tier (``--tier``, a fine-tune's: ``cadence``), it profiles the pretrained
model on the race's training data (``infonoise profile``, as ``benchmarks.finetune_lag`` does, and reusing its
cached profile) and writes two scheduler folders that ``--infonoise_schedule_from`` reads, under
``<out>/quality_race_<tier>/starts/``:

* ``<race>-profile``: the profile's m̂ as it is (the default's start, measured offline: the same-code control of
  the stored start's mechanics);
* ``<race>-bounded``: m̂ bounded at every level by the per-element posterior mean's x0 error
  (:func:`benchmarks.finetune_lag.per_element_bayes_mmse`): a predictor, so a bound on the Bayes MMSE like σ² and V
  (docs/METHOD.md §5.10), which removes model error the pretrained model carries where the data's values are
  resolved element by element. Data on more than 16 values has no such bound here: only ``-profile`` is written.

Each payload is the race's seed-0 InfoNoise run's stored schedule (its path, loss, settings and data statistics)
with its m̂ replaced on a 32-bin grid (bins outside the profile's levels unfilled) and π left for the run to
rebuild: a stored m̂ on another grid is interpolated onto the run's bins and π is rebuilt from it for the run's
settings (``load_schedule``); the run then tracks as usual. The stored m̂ weighs as ``min_count`` samples a bin,
like the profile start's 8 a bin.

    python -m benchmarks.bounded_start --out /path/to/bench_results --tier cadence \\
        --races tk-ft-binarized_mnist16,tk-ft-binarized_digits16
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from benchmarks.finetune_lag import _data_x0, _profile, per_element_bayes_mmse
from benchmarks.race.data import load_data
from diffusers_infonoise.argtypes import positive_int

NUM_BINS = 32  # the stored grid; any grid other than the run's makes the run rebuild π from m̂


def stored_start(payload: dict, sigma: np.ndarray, m_hat: np.ndarray) -> dict:
    """``payload`` (a run's stored schedule) with ``m_hat`` (x0 errors at the increasing levels ``sigma``, VE σ) on a
    :data:`NUM_BINS`-bin grid of the path's range (one more when that is the run's own, so that the run rebuilds π):
    ln m̂ interpolated linearly in ln σ at the bin centres inside the levels' range, null outside; π uniform (the run
    rebuilds it, as the grid is not its own); saved at step 0.

    Raises:
        ValueError: levels not increasing, or an error that is not finite and >= 0."""
    if not (np.all(np.isfinite(m_hat)) and np.all(m_hat >= 0) and np.all(np.diff(sigma) > 0)):
        raise ValueError("sigma, m_hat: need increasing levels and finite errors >= 0")
    lo, hi = math.log(payload["path"]["sigma_min"]), math.log(payload["path"]["sigma_max"])
    k = NUM_BINS if len(payload["pi"]) != NUM_BINS else NUM_BINS + 1  # never the run's grid: it then rebuilds π
    edges = np.linspace(lo, hi, k + 1)
    centres = 0.5 * (edges[1:] + edges[:-1])
    x = np.log(sigma)
    inside = (centres >= x[0]) & (centres <= x[-1])
    m = np.exp(np.interp(centres, x, np.log(np.maximum(m_hat, 1e-30))))
    return {
        **payload,
        "edges": [float(v) for v in edges],
        "m_hat": [float(v) if ok else None for v, ok in zip(m, inside)],
        "pi": [1.0 / k] * k,
        "rho_hat": None,
        "optimizer_steps": 0,
        "num_updates": 1,
        "adapted": True,
        "start": {"choice": "profile", "source": "the pretrained model, profiled offline by benchmarks.bounded_start"},
    }


def write_scheduler(pretrained: Path, payload: dict, out: Path) -> None:
    """The pretrained pipeline's scheduler config with ``payload`` as its stored schedule, written to ``out``
    (a scheduler folder), validated by the library's reader."""
    from diffusers_infonoise.schedule_io import CONFIG_KEY, read_schedule_from

    config = json.loads((pretrained / "scheduler" / "scheduler_config.json").read_text())
    config[CONFIG_KEY] = payload
    out.mkdir(parents=True, exist_ok=True)
    (out / "scheduler_config.json").write_text(json.dumps(config, indent=1))
    read_schedule_from(str(out))  # what --infonoise_schedule_from reads: raises on anything the runs would refuse


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="the quality race's --out (holds quality_race_<tier>/)")
    p.add_argument("--tier", choices=("cadence",), default="cadence", help="the tier whose fine-tunes start from them")
    p.add_argument("--races", type=str, required=True, help="comma-separated race names of that tier")
    p.add_argument("--num_samples", type=positive_int, default=512, help="probe samples of the offline profile")
    args = p.parse_args()

    root = args.out / f"quality_race_{args.tier}"
    for race in args.races.split(","):
        run = json.loads((root / "runs" / f"{race}__infonoise__s0.json").read_text())
        script_args = load_data(run["dataset"])["script_args"]
        dataset = Path(script_args[script_args.index("--dataset_name") + 1])
        pre_name = run["hyperparameters"]["pretrained"]["name"]
        pretrained = root / "pretrained" / pre_name
        prof = _profile(pretrained, dataset, root / "lag_profiles" / f"{pre_name}__{run['dataset']}", args.num_samples)
        sigma, mmse = np.asarray(prof["sigma"], dtype=np.float64), np.asarray(prof["mmse"], dtype=np.float64)
        payload = json.loads((root / "runs" / f"{race}__infonoise__s0" / "scheduler" / "scheduler_config.json").read_text())
        payload = payload["_infonoise_schedule"]
        starts = {"profile": mmse}
        x0 = _data_x0(dataset)
        bound = None if x0 is None else per_element_bayes_mmse(x0, sigma)
        if bound is not None:
            starts["bounded"] = np.minimum(mmse, bound)
        for kind, m in starts.items():
            out = root / "starts" / f"{race}-{kind}"
            write_scheduler(pretrained, stored_start(payload, sigma, m), out)
            print(f"wrote {out} (m_hat at sigma {sigma[0]:.3g}..{sigma[-1]:.3g}: {', '.join(f'{v:.3g}' for v in m[::6])})")


if __name__ == "__main__":
    main()
