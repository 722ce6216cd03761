"""The quality race's sample-quality scores of one data set (issue 6): :class:`Scorer` scores
generated samples against the data set's held-out split — Fréchet distances in the features of the
data set's classifier for images (:mod:`benchmarks.metrics`), k-mer distances for DNA
(:mod:`benchmarks.dna`) — and gives the real-vs-real floors."""

from __future__ import annotations

import numpy as np

from benchmarks import dna as DNA
from benchmarks import metrics as M
from benchmarks.race.data import DataSpec, load_data
from diffusers_infonoise.data import decode_sequences


class Scorer:
    """Scores generated samples (N, 1, H, W) in [0, 1] of one data set against its held-out split."""

    def __init__(self, name: str):
        self.data = load_data(name)
        self.spec: DataSpec = self.data["spec"]
        if self.spec.kind == "image":
            self.net, self.classifier_info = M.classifier_for(
                name,
                self.data["train"],
                self.data["train_labels"],
                self.data["heldout"],
                self.data["heldout_labels"],
                feature_dim=self.spec.feature_dim,
                epochs=self.spec.classifier_epochs,
            )
            self.ref = M.extract_features(self.net, M.to_unit_tensor(self.data["heldout"]))

    @property
    def primary(self) -> str:
        if self.spec.kind == "dna":
            return "js"
        return "fd_thresholded" if self.spec.binary else "fd"

    def score(self, images) -> dict:
        import torch

        images = torch.as_tensor(images, dtype=torch.float32)
        if self.spec.kind == "dna":
            return DNA.kmer_metrics(decode_sequences(images, DNA.ALPHABET), self.data["heldout"])
        out = {"fd": M.frechet_distance_features(M.extract_features(self.net, images), self.ref)}
        if self.spec.binary:
            hard = (images > 0.5).float()
            out["fd_thresholded"] = M.frechet_distance_features(M.extract_features(self.net, hard), self.ref)
            out["frac_grey_pixels"] = float(((images > 0.1) & (images < 0.9)).float().mean())
        out["mean_pixel"] = float(images.mean())
        return out

    def floors(self) -> dict:
        """Real-vs-real floors: the whole training split vs held-out; a random training subset of the
        held-out size vs held-out; two disjoint random held-out halves."""

        rng = np.random.default_rng(0)
        tr, ho = self.data["train"], self.data["heldout"]
        n_ho = len(ho)
        sub = (
            [tr[i] for i in rng.permutation(len(tr))[: min(n_ho, len(tr))]]
            if self.spec.kind == "dna"
            else tr[rng.permutation(len(tr))[:n_ho]]
        )
        perm = rng.permutation(n_ho)
        half_a, half_b = perm[: n_ho // 2], perm[n_ho // 2 :]
        if self.spec.kind == "dna":
            gen_n = 2000
            sub2k = [tr[i] for i in rng.permutation(len(tr))[:gen_n]]
            return {
                "train2000_vs_heldout": DNA.kmer_metrics(sub2k, ho),
                "heldout_half_vs_half": DNA.kmer_metrics([ho[i] for i in half_a], [ho[i] for i in half_b]),
                "sizes": {"train_subset": gen_n, "heldout": n_ho, "halves": [len(half_a), len(half_b)]},
            }
        feat = lambda x: M.extract_features(self.net, M.to_unit_tensor(x))  # noqa: E731
        f_tr, f_sub = feat(tr), feat(sub)
        return {
            "train_vs_heldout": M.frechet_distance_features(f_tr, self.ref),
            "train_subset_vs_heldout": M.frechet_distance_features(f_sub, self.ref),
            "heldout_half_vs_half": M.frechet_distance_features(self.ref[half_a], self.ref[half_b]),
            "sizes": {"train": len(tr), "train_subset": len(sub), "heldout": n_ho, "halves": [len(half_a), len(half_b)]},
        }
