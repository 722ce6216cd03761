"""What an arm's name means (:func:`parse_arm`): a race's sampler with its options, parameters and tag, and the
names shared by the harness, the measures and the tiers."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: the tag of a fixed density fitted at run time (``logit_normal#recommended``, :mod:`benchmarks.race.recommended`);
#: ``#recommended-pilot=<f>`` fits it from scratch on a pilot of the share f of the race's steps instead of
#: :data:`DEFAULT_PILOT_FRACTION`
RECOMMENDED_TAG = "recommended"
#: the share of a race's steps a from-scratch ``#recommended`` arm's pilot trains (the first pass of issue 32)
DEFAULT_PILOT_FRACTION = 0.25
#: the fixed densities a ``#recommended`` arm may name: the normals in ln σ (METHOD.md §6.1's one 2-parameter family)
RECOMMENDABLE = ("logit_normal", "edm_lognormal")
#: the fixed density recommended from a profile (issue 32; :mod:`benchmarks.race.recommended`), as the tiers race it
RECOMMENDED_ARM = f"logit_normal#{RECOMMENDED_TAG}"


@dataclass(frozen=True)
class Arm:
    """What a race's sampler name says (:func:`parse_arm`): ``<sampler>[-<option>...][@<key>=<value>,...][#<tag>]``.

    ``name`` is the library's sampler (``--noise_sampler``); ``options`` are InfoNoise-style variant options
    (``<flag>_<value>`` or ``<flag>=<value>``: ``--infonoise_<flag> <value>``, for the adaptive samplers);
    ``params`` the parameters of a fixed density in the library's convention (the keywords of
    :func:`diffusers_infonoise.baselines.base_density`: logit_normal's ``mean`` is the centre of ln σ on VE, > 0
    more noise; ``std``; edm_lognormal's ``P_mean``, ``P_std``; mode's ``scale``); ``tag`` a label only (the same
    arguments under another name, e.g. ``infonoise#v2`` for InfoNoise re-run on newer code), except
    :data:`RECOMMENDED_TAG`: ``logit_normal#recommended`` is the fixed density whose parameters are fitted at run time
    to a profile of the race's model on its data (:mod:`benchmarks.race.recommended`)."""

    name: str
    options: tuple = ()
    params: tuple = ()  # ((key, value), ...), in the order given
    tag: str = ""

    @property
    def recommended(self) -> bool:
        """Whether the arm's parameters are resolved at run time from a profile (``#recommended[-pilot=<f>]``)."""
        return self.tag == RECOMMENDED_TAG or self.tag.startswith(f"{RECOMMENDED_TAG}-pilot=")

    @property
    def pilot_fraction(self) -> float | None:
        """A ``#recommended`` arm's pilot share of the race's steps (from scratch): ``f`` of ``-pilot=<f>``, else
        :data:`DEFAULT_PILOT_FRACTION`; ``None`` for other arms."""
        if not self.recommended:
            return None
        return float(self.tag.partition("=")[2]) if "=" in self.tag else DEFAULT_PILOT_FRACTION

    @property
    def kind(self) -> str:
        """``"infonoise"`` (InfoNoise and its variants), ``"fixed"`` (a fixed density) or ``"adaptive"`` (another
        adaptive sampler: Kingma & Gao, the loss slope)."""
        from diffusers_infonoise.sampler import FIXED_DENSITY_NAMES

        return "infonoise" if self.name == "infonoise" else "fixed" if self.name in FIXED_DENSITY_NAMES else "adaptive"


def parse_arm(arm: str) -> Arm:
    """The :class:`Arm` of a sampler name such as ``infonoise``, ``infonoise-gate_none``, ``logit_normal@mean=-2``,
    ``logit_normal@mean=-1.3,std=0.8``, ``infonoise#v2`` or ``logit_normal#recommended``.

    Raises:
        ValueError: an unknown sampler, a parameter that is not ``<key>=<number>``, parameters on an adaptive
            sampler or variant options on a fixed density, ``#recommended`` on a sampler other than
            :data:`RECOMMENDABLE` or with @parameters (they are fitted) (naming the arm and what is accepted).
    """
    from diffusers_infonoise.sampler import FIXED_DENSITY_NAMES, SAMPLER_NAMES

    head, _, tag = arm.partition("#")
    head, at, text = head.partition("@")
    name, *options = head.split("-")
    if name not in SAMPLER_NAMES:
        raise ValueError(f"arm {arm!r}: unknown sampler {name!r}; accepted: {', '.join(SAMPLER_NAMES)}")
    params = []
    for item in text.split(",") if at else ():
        key, eq, value = item.partition("=")
        try:
            params.append((key, float(value)))
        except ValueError:
            eq = ""
        if not (key and eq):
            raise ValueError(f"arm {arm!r}: parameter {item!r} is not <key>=<number>")
    if params and name not in FIXED_DENSITY_NAMES:
        raise ValueError(f"arm {arm!r}: @parameters are a fixed density's ({', '.join(FIXED_DENSITY_NAMES)})")
    if options and name in FIXED_DENSITY_NAMES:
        raise ValueError(f"arm {arm!r}: -<flag>_<value> options are for the adaptive samplers, not a fixed density")
    if tag.startswith(f"{RECOMMENDED_TAG}-pilot="):
        try:
            fraction = float(tag.partition("=")[2])
        except ValueError:
            fraction = math.nan
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"arm {arm!r}: #{RECOMMENDED_TAG}-pilot=<f> takes the pilot's share of the race's steps, a number in (0, 1]")
    if Arm(name, tag=tag).recommended and (name not in RECOMMENDABLE or params or options):
        raise ValueError(
            f"arm {arm!r}: #{RECOMMENDED_TAG} fits the parameters of {' or '.join(RECOMMENDABLE)} at run time; "
            f"name one of them without @parameters or options"
        )
    return Arm(name, tuple(options), tuple(params), tag)


def run_arm(run: dict) -> str:
    """The arm a finished run trained: its sampler name, or for an arm resolved at run time (``#recommended``) the
    explicit arm it resolved to (``resolved_arm`` of its result, e.g. ``logit_normal@mean=-1.2,std=0.9``)."""
    return run.get("resolved_arm") or run["sampler"]


def split_arms(text: str) -> list[str]:
    """A comma-separated list of arm names (``--samplers``), where a comma inside ``@key=value,key=value`` does not
    separate two arms: ``"infonoise,logit_normal@mean=-1.3,std=0.8"`` is two arms."""
    arms: list[str] = []
    for piece in text.split(","):
        if arms and "@" in arms[-1] and "#" not in arms[-1] and re.fullmatch(r"\w+=[^@#]*(#.*)?", piece):
            arms[-1] += "," + piece  # the next parameter of the previous arm
        elif piece:
            arms.append(piece)
    return arms
