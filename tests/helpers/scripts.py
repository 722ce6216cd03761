"""The training scripts as the tests run them: imported by path as modules (they are files of the checkout), and the
one-line error that a bad option must give."""

from __future__ import annotations

import importlib.util
import re

import pytest

from helpers import ROOT


def load_training_script(name: str, module_name: str | None = None):
    """``training_scripts/<name>.py`` imported as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(module_name or name, ROOT / "training_scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_option_error(capsys, match: str, main, argv) -> str:
    """``main(argv)`` exits with status 2 and one line ``<script>: error: ...`` on stderr matching ``match``."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("usage:") and not line.startswith(" ")]
    assert info.value.code == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and ": error: " in lines[0] and re.search(match, lines[0]), err
    return lines[0]
