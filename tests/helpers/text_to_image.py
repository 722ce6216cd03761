"""Shared by the text-to-image end-to-end tests (scripts/: test_text_to_image.py, test_sd3.py, test_sdxl.py,
test_flux.py): a few-step argument list, InfoNoise options that adapt from the second step, and readers
of what a run leaves (sampler state, stored schedule, tensorboard tags, model-card tags)."""

from __future__ import annotations

import json
import os

import torch

from benchmarks.tiny_pipelines import RESOLUTION

# a few optimizer steps; InfoNoise adapts from the second step on so that its state moves
FAST = [
    "--resolution",
    str(RESOLUTION),
    "--train_batch_size",
    "2",
    "--seed",
    "0",
    "--lr_warmup_steps",
    "0",
    "--validation_inference_steps",
    "2",
    "--schedule_plot_steps",
    "0",
]
INFONOISE = [
    "--noise_sampler",
    "infonoise",
    "--infonoise_warmup_steps",
    "1",
    "--infonoise_refresh_every",
    "1",
    "--infonoise_min_count",
    "1",
    "--infonoise_num_bins",
    "16",
]


def sampler_state(folder):
    from safetensors.torch import load_file

    tensors = load_file(os.path.join(folder, "infonoise_sampler.safetensors"))
    with open(os.path.join(folder, "infonoise_sampler.json")) as f:
        plain = json.load(f)
    return tensors, plain


def assert_same_sampler_state(dir_a, dir_b):
    ta, pa = sampler_state(dir_a)
    tb, pb = sampler_state(dir_b)
    assert sorted(ta) == sorted(tb)
    for k in ta:
        torch.testing.assert_close(ta[k], tb[k], rtol=0, atol=0, equal_nan=True, msg=k)
    assert pa == pb


def scheduler_config_and_payload(folder):
    with open(os.path.join(folder, "scheduler", "scheduler_config.json")) as f:
        config = json.load(f)
    return config, config["_infonoise_schedule"]


def tensorboard_tags(output_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = {"images": set(), "scalars": set()}
    for root, _, files in os.walk(os.path.join(output_dir, "logs")):
        if any(f.startswith("events.out") for f in files):
            acc = EventAccumulator(root, size_guidance={"images": 0, "scalars": 0})
            acc.Reload()
            for kind in tags:
                tags[kind] |= set(acc.Tags()[kind])
    return tags


def front_matter_tags(readme):
    text = open(readme).read()
    front = text.split("---")[1]
    return [line[2:].strip() for line in front.splitlines() if line.startswith("- ")], text
