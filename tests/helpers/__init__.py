"""What the tests share; none of it is a test module, and no test module imports another. tests/ is on the path
(pytest's ``pythonpath`` in pyproject.toml), so these import as ``helpers.<module>``
(the tiny random UNets and text-to-image pipelines are ``benchmarks.tiny_pipelines``, which the benchmarks build too):

- ``reference``: the independent values the tests compare against (closed-form MMSE of Gaussian and two-point data,
  paths, base masses, the x0-error conversion and loss weights written by hand, KS and TV);
- ``scripts``: the training scripts imported as modules, and the one-line error of a bad option;
- ``launch``: a free port, and ``accelerate launch`` of a script on CPU processes (every multi-process run and
  resume), the refreshes its log reports;
- ``unconditional``: fixtures (a pytest plugin, see conftest.py), arguments and readers of ``train_unconditional``
  runs;
- ``text_to_image``: few-step arguments and readers of the text-to-image scripts' runs;
- ``cli``: the ``infonoise`` command run in-process, and a fixture of saved schedules for it (a pytest plugin);
- ``dist_worker`` and ``ddp_pattern_script``: what the other processes run (``torch.multiprocessing`` workers; a
  script that ``accelerate launch`` runs by path).
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
DATA = ROOT / "tests" / "data"  # committed fixtures
