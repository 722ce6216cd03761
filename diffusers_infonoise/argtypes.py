"""argparse types shared by the training scripts and the ``infonoise`` command: each turns text into a
value of the library or raises ``argparse.ArgumentTypeError``, which argparse reports naming the option.

One rule for the words an option takes besides numbers: ``auto``, ``none`` (and the gate's ``off`` and rules), and
``true``/``false`` are accepted in any case and stored in lower case, so ``AUTO`` is stored as ``'auto'``. Options
that choose from a list of names (argparse ``choices``) take ``auto`` the same way (:func:`auto_arg`) and their
other names as written.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from .estimator import parse_gate

__all__ = [
    "auto_arg",
    "positive_int",
    "nonnegative_int",
    "plot_steps_arg",
    "finite_float",
    "positive_float",
    "nonnegative_float",
    "unit_interval_arg",
    "seed_arg",
    "gate_arg",
    "mmse_cap_arg",
    "warmup_arg",
    "memory_arg",
    "ema_decay_arg",
    "bool_arg",
    "output_file_arg",
    "figure_file_arg",
    "output_dir_arg",
    "existing_dir_arg",
]


def is_real(x) -> bool:
    """A finite int or float (not a bool); an int too large for a float (``10**400``) is not one."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _is_auto(value: str) -> bool:
    return value.lower() == "auto"


def auto_arg(value: str) -> str:
    """argparse type of an option whose ``choices`` include ``auto``: ``auto`` in any case as ``'auto'``, any other
    name as written (``choices`` then checks it)."""
    return "auto" if _is_auto(value) else value


def _int_at_least(value: str, low: int) -> int:
    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value!r}") from None
    if v < low:
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {v}")
    return v


def positive_int(value: str) -> int:
    """argparse type: an int >= 1 (argparse names the option in its error)."""
    return _int_at_least(value, 1)


def nonnegative_int(value: str) -> int:
    """argparse type: an int >= 0."""
    return _int_at_least(value, 0)


def plot_steps_arg(value: str) -> int:
    """argparse type of ``--schedule_plot_steps``: an int >= 1, 0 (every refresh) or -1 (never)."""
    return _int_at_least(value, -1)


def finite_float(value: str) -> float:
    """argparse type: a finite float (a density's location: ``nan`` or ``inf`` would reach the draws as NaN)."""
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a finite number, got {value!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {value!r}")
    return v


def positive_float(value: str) -> float:
    """argparse type: a finite float > 0."""
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {value!r}")
    return v


def nonnegative_float(value: str) -> float:
    """argparse type: a finite float >= 0 (``--max_grad_norm``: 0 turns clipping off)."""
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {value!r}") from None
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {value!r}")
    return v


def unit_interval_arg(value: str) -> float:
    """argparse type: a float in [0, 1) (Adam's betas; torch refused the others when the optimizer was built, after
    the data and the model were loaded)."""
    try:
        v = float(value)
    except ValueError:
        v = math.nan
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {value!r}")
    return v


#: the seeds every generator a run seeds takes (numpy's legacy ``np.random.seed``: 0 .. 2**32 - 1)
MAX_SEED = 2**32 - 1


def seed_arg(value: str) -> int:
    """argparse type of ``--seed``: an int in [0, 2**32 - 1] (numpy refused the others when the run was seeded)."""
    v = _int_at_least(value, 0)
    if v > MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, {MAX_SEED}], got {v}")
    return v


def gate_arg(value: str):
    """``--infonoise_gate`` and the command's ``--gate``: :func:`~diffusers_infonoise.gate.parse_gate`."""
    try:
        return parse_gate(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def mmse_cap_arg(value: str):
    """``--infonoise_mmse_cap``: ``none``, ``auto`` or a float > 0."""
    if value.lower() in ("none", "auto"):
        return value.lower()
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"accepted values: 'none', 'auto' or a float > 0, got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"accepted values: 'none', 'auto' or a float > 0, got {value!r}")
    return v


def warmup_arg(value: str):
    """``--infonoise_warmup_steps``: ``auto`` or an int >= 0."""
    if _is_auto(value):
        return "auto"
    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"accepted values: 'auto' or an int >= 0, got {value!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"accepted values: 'auto' or an int >= 0, got {value!r}")
    return v


def memory_arg(value: str):
    """``--infonoise_memory``: ``auto`` or a number of optimizer steps > 0."""
    if _is_auto(value):
        return "auto"
    try:
        return positive_float(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be 'auto' or a number of optimizer steps > 0, got {value!r}") from None


def ema_decay_arg(value: str):
    """``--infonoise_ema_decay``: ``none`` (the discounted mean) or a float in [0, 1)."""
    if value.lower() == "none":
        return None
    try:
        beta = float(value)
    except ValueError:
        beta = math.nan
    if not 0.0 <= beta < 1.0:
        raise argparse.ArgumentTypeError(f"must be 'none' or a float in [0, 1), got {value!r}")
    return beta


def bool_arg(value: str) -> bool:
    """``true``/``false`` (also ``1``/``0``, ``yes``/``no``)."""
    v = value.lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"must be true or false, got {value!r}")


def figure_file_arg(value: str) -> str:
    """``--plot FILE`` of the ``infonoise`` command: a file name whose suffix names a format matplotlib writes, checked
    before anything is computed (matplotlib refused the others only after the work, naming no option, and saved a name
    without a suffix as ``FILE.png``). Without matplotlib (the ``[train]`` extra) the command says so when it draws."""
    output_file_arg(value)
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return value
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    if Path(value).suffix.lstrip(".").lower() not in formats:
        raise argparse.ArgumentTypeError(f"{value!r}: a figure file ending in one of {', '.join('.' + f for f in formats)}")
    return value


def output_file_arg(value: str) -> str:
    """A file the command writes at its end (``--plot``, ``--json``): its folder must exist and the name must not be a
    folder, checked before anything is computed (the write failed after the work, naming no option)."""
    path = Path(value)
    if not value:
        raise argparse.ArgumentTypeError("expected a file name, got ''")
    if path.is_dir() or value.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"{value!r}: expected a file name, not a folder")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r}: its folder {str(path.parent)!r} does not exist")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{value!r}: not writable")
    return value


def output_dir_arg(value: str) -> str:
    """``--output_dir``: a folder, created when missing; an empty name, an existing file, a folder under a file or
    one that cannot be created (its nearest existing folder is not writable) is refused (``os.makedirs`` failed on
    them after the data and the model were loaded). Nothing is created here."""
    if not value:
        raise argparse.ArgumentTypeError("expected a folder (created when missing), got ''")
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} exists and is not a folder: give a folder (created when missing)")
    existing = next(p for p in (path, *path.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} cannot be created: {str(existing)!r} is a file, not a folder")
    if existing != path and not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{value!r} cannot be created: {str(existing)!r} is not writable")
    return value


def existing_dir_arg(value: str) -> str:
    """An input folder (``--train_data_dir``): it must exist, checked at parse time, before a model is loaded (a
    mistyped folder surfaced after the model as datasets' "doesn't contain any data files")."""
    if not value:
        raise argparse.ArgumentTypeError("expected a folder, got ''")
    if not Path(value).is_dir():
        raise argparse.ArgumentTypeError(f"no such folder: {value}" if not Path(value).exists() else f"{value!r}: not a folder")
    return value
