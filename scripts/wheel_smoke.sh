#!/usr/bin/env bash
# What `pip install diffusers-infonoise` gives a user, without the checkout: build the wheel, install it
# into a fresh target folder (the dependencies come from .venv), and from a folder outside the checkout run
# the `infonoise` command, the installed training script (its console command trains, saves the pipeline with
# the stored schedule and writes the model card; `python -m` reaches the same module), and the safe load of
# that pipeline.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
py="$repo/.venv/bin/python"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$py" -m pip wheel -q --no-deps -w "$work/dist" "$repo"
"$py" -m pip install -q --no-deps --target "$work/site" "$work"/dist/diffusers_infonoise-*.whl
cd "$work"
export PYTHONPATH="$work/site"
"$py" - "$work/site" <<'PY'
import sys
import diffusers_infonoise as d
assert d.__file__.startswith(sys.argv[1]), f"imported {d.__file__}, not the installed wheel"
from diffusers_infonoise.training.outputs import model_card_templates
assert model_card_templates().startswith(sys.argv[1]), model_card_templates()
print(f"wheel: diffusers-infonoise {d.__version__} from {d.__file__}")
PY
"$work/site/bin/infonoise" --help >/dev/null
for command in infonoise-train-unconditional infonoise-train-text-to-image infonoise-train-text-to-image-sdxl \
  infonoise-train-text-to-image-sd3 infonoise-train-text-to-image-flux; do
  "$work/site/bin/$command" --help | tr -s "\n " "  " | grep -q "python -m diffusers_infonoise.training_scripts" || { echo "$command --help"; exit 1; }
done
# python -m runs the installed module, not the checkout's file
"$py" -m diffusers_infonoise.training_scripts.train_unconditional --help | grep -q -- "--pretrained_model_name_or_path"
"$py" -c 'import sys, diffusers_infonoise.training_scripts.train_unconditional as m; assert m.__file__.startswith(sys.argv[1]), m.__file__' "$work/site"
"$work/site/bin/infonoise-train-unconditional" --diffusion edm --dataset_name digits --resolution 8 \
  --max_train_samples 64 --train_batch_size 8 --max_train_steps 6 --infonoise_num_bins 16 --infonoise_min_count 1 \
  --infonoise_refresh_every 2 --num_inference_steps 2 --eval_batch_size 2 --lr_warmup_steps 0 --logger none \
  --seed 0 --output_dir "$work/run" >"$work/train.log" 2>&1 || { tail -40 "$work/train.log"; exit 1; }
"$py" - "$work/run" <<'PY'
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
print("wheel smoke: infonoise --help, the installed training commands and python -m, a training run, its model card and the safe load all work outside the checkout")
PY
