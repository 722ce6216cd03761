"""benchmarks/pi_settling (the threshold of recommend's "still moving" warning), on a hand-made π history."""

from __future__ import annotations

import json

import pytest

from benchmarks import pi_settling


def test_moves_sums_and_distances_to_the_end_by_hand(tmp_path):
    # π on two bins at five refreshes: TVs between consecutive ones 0.1, 0.05, 0.02, 0.01
    pis = [[0.5, 0.5], [0.6, 0.4], [0.65, 0.35], [0.67, 0.33], [0.68, 0.32]]
    h = tmp_path / "history.jsonl"
    h.write_text("".join(json.dumps({"step": 50 * (i + 1), "probs": p}) + "\n" for i, p in enumerate(pis)))
    out = pi_settling.run_history(h)
    assert out["moves"] == pytest.approx([0.1, 0.05, 0.02, 0.01])
    # S at the 4th refresh (step 200): 0.1 + 0.05 + 0.02; at the 5th: 0.05 + 0.02 + 0.01; D: TV to [0.68, 0.32]
    assert [p["step"] for p in out["points"]] == [200, 250]
    assert [p["s"] for p in out["points"]] == pytest.approx([0.17, 0.08])
    assert [p["d"] for p in out["points"]] == pytest.approx([0.01, 0.0])
    assert [p["last"] for p in out["points"]] == [False, True]
