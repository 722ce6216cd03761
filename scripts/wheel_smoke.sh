#!/usr/bin/env bash
# What `pip install "diffusers-infonoise[train]"` gives a user, proved without the checkout: build the wheel, check it
# holds every module of the source tree, install it with its [train] dependencies into a FRESH virtual environment
# (no editable install, nothing of the checkout on the path; CPU torch first, as scripts/setup.sh does), and from a
# folder outside the checkout import every module of the installed package, run `infonoise --help`, every
# `infonoise-train-*` command and `python -m`, a short training run that writes the pipeline, its stored schedule and
# its model card, then load that pipeline and sample from it.
# Usage: bash scripts/wheel_smoke.sh   (WHEEL_SMOKE_KEEP=1 keeps the work folder for inspection)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
PY=${PYTHON:-python3}
work="$(mktemp -d)"
quiet() { "$@" >>"$work/pip.log" 2>&1 || { tail -40 "$work/pip.log"; echo "wheel smoke: failed: $*"; exit 1; }; }
[ -n "${WHEEL_SMOKE_KEEP:-}" ] && echo "wheel smoke: work folder $work" || trap 'rm -rf "$work"' EXIT

# 1. the wheel, built in an isolated build environment from a copy of the tracked files (as a clean clone has them)
"$PY" -m venv "$work/venv"
venv="$work/venv/bin"
quiet "$venv/python" -m pip install -q --upgrade pip
mkdir -p "$work/src"
git -C "$repo" ls-files -z | (cd "$repo" && tar --null -T - -cf -) | tar -x -C "$work/src"
quiet "$venv/python" -m pip wheel -q --no-deps -w "$work/dist" "$work/src"
wheel=$(ls "$work"/dist/diffusers_infonoise-*.whl)

# 2. every module of the source tree is in the wheel (the package and the two folders pyproject maps into it)
"$PY" - "$work/src" "$wheel" <<'PY'
import sys, zipfile
from pathlib import Path
src, wheel = Path(sys.argv[1]), sys.argv[2]
mapped = {"model_cards": "diffusers_infonoise/model_cards", "training_scripts": "diffusers_infonoise/training_scripts"}
expected = {p.relative_to(src).as_posix() for p in (src / "diffusers_infonoise").rglob("*.py")}
for folder, target in mapped.items():
    expected |= {f"{target}/{p.relative_to(src / folder).as_posix()}" for p in (src / folder).rglob("*") if p.suffix in (".py", ".j2")}
shipped = set(zipfile.ZipFile(wheel).namelist())
missing = sorted(expected - shipped)
assert not missing, f"the wheel {Path(wheel).name} lacks {len(missing)} file(s) of the source tree: {missing}"
print(f"wheel smoke: {Path(wheel).name} holds all {len(expected)} modules and templates of the source tree")
PY

# 3. a fresh virtual environment with the wheel and its [train] extra, nothing of the checkout
quiet "$venv/python" -m pip install -q torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
quiet "$venv/python" -m pip install -q "$wheel[train]"
cd "$work"
unset PYTHONPATH

# 4. every module imports from the installed copy, from outside the checkout
"$venv/python" - "$repo" "$work/venv" <<'PY'
import importlib, pkgutil, sys
repo, venv = sys.argv[1], sys.argv[2]
assert not any(p.startswith(repo) for p in sys.path if p), f"the checkout is on sys.path: {sys.path}"
import diffusers_infonoise as d
# every module but the __main__ ones (importing those runs the command)
names = ["diffusers_infonoise"] + [m.name for m in pkgutil.walk_packages(d.__path__, "diffusers_infonoise.") if not m.name.endswith("__main__")]
for name in names:
    module = importlib.import_module(name)
    assert module.__file__.startswith(venv), f"{name} imported from {module.__file__}, not the installed wheel"
from diffusers_infonoise.training.outputs import model_card_templates
assert model_card_templates().startswith(venv), model_card_templates()
print(f"wheel smoke: diffusers-infonoise {d.__version__}: all {len(names)} modules import from {venv}")
PY

# 5. the commands
"$venv/infonoise" --help >/dev/null
for command in infonoise-train-unconditional infonoise-train-text-to-image infonoise-train-text-to-image-sdxl \
  infonoise-train-text-to-image-sd3 infonoise-train-text-to-image-flux; do
  "$venv/$command" --help | tr -s "\n " "  " | grep -q "python -m diffusers_infonoise.training_scripts" || { echo "$command --help"; exit 1; }
done
"$venv/python" -m diffusers_infonoise.training_scripts.train_unconditional --help | grep -q -- "--pretrained_model_name_or_path"

# 6. a short training run with its card, then the safe load of the pipeline it saved
"$venv/infonoise-train-unconditional" --diffusion edm --dataset_name digits --resolution 8 \
  --max_train_samples 64 --train_batch_size 8 --max_train_steps 6 --infonoise_num_bins 16 --infonoise_min_count 1 \
  --infonoise_refresh_every 2 --num_inference_steps 2 --eval_batch_size 2 --lr_warmup_steps 0 --logger none \
  --seed 0 --output_dir "$work/run" >"$work/train.log" 2>&1 || { tail -40 "$work/train.log"; exit 1; }
"$venv/infonoise" show "$work/run" >/dev/null
"$venv/python" - "$work/run" <<'PY'
import sys
import torch
from diffusers_infonoise import InfoNoiseUnconditionalPipeline, read_schedule
pipe = InfoNoiseUnconditionalPipeline.from_pretrained(sys.argv[1])
payload = read_schedule(pipe.scheduler)
assert payload is not None and payload["adapted"] and payload["optimizer_steps"] == 6, payload
images = pipe(batch_size=2, num_inference_steps=2, output_type="pt", generator=torch.Generator().manual_seed(0)).images
assert images.shape == (2, 1, 8, 8) and bool(torch.isfinite(images).all())
card = open(f"{sys.argv[1]}/README.md").read()
assert "InfoNoiseUnconditionalPipeline.from_pretrained" in card and "TV(φ, ρ̂)" in card
print("wheel smoke: in a fresh venv outside the checkout, infonoise --help and show, the training commands and python -m, a training run, its model card and the safe load all work")
PY
