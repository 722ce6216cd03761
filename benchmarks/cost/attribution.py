"""The time a training run spends in the code that depends on the noise sampler, per optimizer step, measured from
outside with the standard library's profiler (:mod:`cProfile`, read back with :mod:`pstats`): no function, method
or attribute of the code under test is replaced.

The sampler-dependent code (:func:`sampler_functions`) is what the training loop runs that differs between noise
samplers: the sampler's ``sample``/``add_noise``/``update``/``step`` (every definition of them on
:class:`~diffusers_infonoise.sampler.TrainingTimestepSampler` and its subclasses), the loop's ``weighted_loss`` and
:class:`~diffusers_infonoise.training.ScheduleMonitor`'s ``observe``/``after_step``. Only outermost calls count
(:func:`outermost_seconds`): the cumulative time of the calls made into the set from functions outside it, read from
the profile's per-caller times, so that a subclass's ``super().update(...)`` is part of the call that made it.

A profile covers a whole ``main([...])``; the per-step time of a window of steps ``skip`` + 1 .. ``steps`` is the
difference of two profiled runs of the same script, seed and data, one to step ``steps`` and one to step ``skip``
(:func:`profile_window`), divided by ``steps - skip``. Both profiled runs pass ``--schedule_plot_steps -1``: the
schedule plots drawn at InfoNoise's first refresh (step ``skip``, before the window; the next would be 500 steps
later) take about a second, whose run-to-run jitter would otherwise not cancel in the difference; the window's code
is the same either way.

What the profiler costs. It adds a roughly fixed time to every Python function call, inside the sampler code and in
the rest of the step alike (the data pipeline, accelerate, the model's modules), so profiled steps are slower than
untimed ones (``profiled_mean_step_s`` against the untimed runs' ``mean_step_s``). The attributable overhead is
therefore a ratio of profiled times, (sampler code s/step with InfoNoise − with the baseline) / the baseline's profiled
step time (:func:`attributable_ratio`): both inflated by the profiler, most where Python calls are densest. On a GPU
the profiler sees the host's time in a call (kernel launches; a call that synchronises waits for the queue);
``CUDA_LAUNCH_BLOCKING=1`` makes each call's device work its own.
"""

from __future__ import annotations

import cProfile
import inspect
import pstats
import statistics
from typing import Callable

#: the sampler methods the training loop calls (directly or through the script's ``compute_loss``)
SAMPLER_METHODS = ("sample", "add_noise", "update", "step")

#: what the attribution is, for the results' "method" fields
METHOD = (
    "Attribution: in separate profiled runs (cProfile around the script's main, read with pstats; nothing in the code "
    "under test is replaced), the cumulative time of the outermost calls into the sampler-dependent code (every "
    "sample/add_noise/update/step defined on TrainingTimestepSampler and its subclasses, the loop's weighted_loss, "
    "ScheduleMonitor.observe/after_step; calls made from inside the set, such as super() chains, are part of the outer "
    "call) over the window is the difference of a profiled run to the window's end and one to its start (both with "
    "--schedule_plot_steps -1, so the plots at the first refresh, before the window, do not add their jitter), per step. "
    "Attributable ratio = 1 + (that time per step with InfoNoise - with the baseline) / the baseline's profiled step "
    "time over the window. The profiler adds a cost to every Python call, so both the sampler code and the step are "
    "inflated by it; the ratio is of profiled times (profiled_mean_step_s beside mean_step_s shows the inflation)."
)


def _code_key(fn) -> tuple[str, int, str]:
    """The key under which :mod:`pstats` lists ``fn`` (a function, or a static/class method object)."""
    code = inspect.unwrap(getattr(fn, "__func__", fn)).__code__
    return code.co_filename, code.co_firstlineno, code.co_name


def sampler_functions() -> dict[tuple[str, int, str], str]:
    """The sampler-dependent code as ``{pstats key: label}``: ``"Class.method"`` for every definition of
    :data:`SAMPLER_METHODS` on :class:`~diffusers_infonoise.sampler.TrainingTimestepSampler` and its subclasses
    (those imported when it is called), ``"weighted_loss"`` and ``"ScheduleMonitor.observe"``/``".after_step"``."""
    from diffusers_infonoise.sampler import TrainingTimestepSampler
    from diffusers_infonoise.training import ScheduleMonitor, loop

    functions = {}
    classes, seen = [TrainingTimestepSampler], set()
    while classes:
        cls = classes.pop()
        if cls in seen:
            continue
        seen.add(cls)
        classes += cls.__subclasses__()
        for name in SAMPLER_METHODS:
            if name in cls.__dict__:
                functions[_code_key(cls.__dict__[name])] = f"{cls.__name__}.{name}"
    functions[_code_key(loop.weighted_loss)] = "weighted_loss"
    for name in ("observe", "after_step"):
        functions[_code_key(ScheduleMonitor.__dict__[name])] = f"ScheduleMonitor.{name}"
    return functions


def outermost_seconds(stats: dict, functions: dict) -> dict[str, float]:
    """Seconds in the outermost calls of ``functions`` (``{pstats key: label}``), per label (labels that were
    not called are absent): for each function of the set, the cumulative time of its calls from callers outside
    the set (a function with no caller at all, the profile's top, counts whole). ``stats`` is
    :attr:`pstats.Stats.stats` (``{key: (cc, nc, tt, ct, {caller: (cc, nc, tt, ct)})}``).

    A call into the set made by an outside function that was itself called from inside the set would count twice;
    :func:`reentries` lists such callers (none in the training scripts)."""
    spent: dict[str, float] = {}
    for key, label in functions.items():
        if key not in stats:
            continue
        _, _, _, ct, callers = stats[key]
        outer = sum(edge[3] for caller, edge in callers.items() if caller not in functions) if callers else ct
        spent[label] = spent.get(label, 0.0) + outer
    return spent


def reentries(stats: dict, functions: dict) -> list[str]:
    """Outside callers of the set that are reachable from inside it in the profile's call graph, as
    ``"file:line(name)"``: where :func:`outermost_seconds` may count a nested call twice (the graph has no stacks,
    so this is conservative: the caller may have been called from outside only)."""
    callees: dict = {}
    for key, entry in stats.items():
        for caller in entry[4]:
            callees.setdefault(caller, []).append(key)
    reached, todo = set(), [c for f in functions for c in callees.get(f, ())]
    while todo:
        key = todo.pop()
        if key not in reached and key not in functions:
            reached.add(key)
            todo += callees.get(key, ())
    callers = {c for f in functions if f in stats for c in stats[f][4] if c not in functions}
    return sorted(pstats.func_std_string(c) for c in callers & reached)


def profiled(main: Callable[..., dict], *args) -> tuple[dict, dict[str, float], list[str]]:
    """``main(*args)`` under :class:`cProfile.Profile`; returns its result, :func:`outermost_seconds` of
    :func:`sampler_functions` and :func:`reentries`."""
    profile = cProfile.Profile()
    result = profile.runcall(main, *args)
    stats = pstats.Stats(profile).stats
    functions = sampler_functions()
    return result, outermost_seconds(stats, functions), reentries(stats, functions)


def profile_window(run: Callable[[list[str]], dict], skip: int, steps: int) -> dict:
    """The sampler-dependent code's time per step over steps ``skip`` + 1 .. ``steps`` of a training script.

    Args:
        run: ``run(extra_args)`` runs the script's ``main`` on its arguments followed by ``extra_args`` (which
            override them: argparse keeps an option's last value) and returns ``main``'s result, whose
            ``"step_times"`` are the loop's per-step wall times in seconds. It is called twice, profiled, with
            ``--max_train_steps`` ``steps`` and ``skip`` and ``--schedule_plot_steps -1``.
        skip, steps: the window (1-based optimizer steps, inclusive), ``0 <= skip < steps``.

    Returns:
        ``sampler_calls_s_per_step`` (seconds per step in the window, per ``"Class.method"`` label),
        ``sampler_code_s_per_step`` (their sum), ``profiled_mean_step_s`` and ``profiled_median_step_s`` (of the
        longer profiled run's steps in the window) and ``reentries`` (:func:`reentries`, both runs).

    Raises:
        ValueError: ``skip``/``steps`` out of order.
    """
    if not 0 <= skip < steps:
        raise ValueError(f"skip, steps: need 0 <= skip < steps, got {skip}, {steps}")
    spent, seen = {}, set()
    for n, sign in ((steps, 1.0), (skip, -1.0)):
        if n == 0:
            continue
        result, seconds, suspects = profiled(run, ["--max_train_steps", str(n), "--schedule_plot_steps", "-1"])
        seen.update(suspects)
        for label, s in seconds.items():
            spent[label] = spent.get(label, 0.0) + sign * s
        if n == steps:
            window = result["step_times"][skip:steps]
    per_label = {label: s / (steps - skip) for label, s in sorted(spent.items())}
    return {
        "sampler_calls_s_per_step": per_label,
        "sampler_code_s_per_step": sum(per_label.values()),
        "profiled_mean_step_s": sum(window) / len(window),
        "profiled_median_step_s": statistics.median(window),
        "reentries": sorted(seen),
    }


def attributable_ratio(infonoise: dict, baseline: dict) -> float:
    """``1 + (sampler code s/step with InfoNoise − with the baseline) / the baseline's profiled step time``, from
    two :func:`profile_window` results."""
    return 1.0 + (infonoise["sampler_code_s_per_step"] - baseline["sampler_code_s_per_step"]) / baseline["profiled_mean_step_s"]
