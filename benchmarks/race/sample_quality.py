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


def in_data_units(images, scale: float):
    """Samples as :func:`~diffusers_infonoise.generation.generate_images` returns them ((x + 1)/2 clamped to [0, 1], x
    in model units) of data trained at ``scale`` times its own units (:attr:`DataSpec.scale`), in the data's own
    [0, 1]: x divided by ``scale``. Exact for a scale ≤ 1 (|x| ≤ 1 holds the data); for a scale > 1 only the sign of
    x survives the clamp."""
    if scale == 1:
        return images
    return ((images * 2 - 1) / scale / 2 + 0.5).clamp(0, 1)


class Scorer:
    """Scores generated samples (N, 1, H, W) in [0, 1] of one data set against its held-out split (a data set that
    transforms another, :attr:`DataSpec.base`, shares that one's held-out split and classifier: its samples are
    brought back to the base's units first, :func:`in_data_units`)."""

    def __init__(self, name: str):
        self.data = load_data(name)
        self.spec: DataSpec = self.data["spec"]
        if self.spec.kind == "image":
            self.net, self.classifier_info = M.classifier_for(
                self.spec.base or name,
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
            tokens = decode_sequences(images, DNA.kmer_alphabet(self.spec.kmer))
            return DNA.kmer_metrics(DNA.kmer_bases(tokens, self.spec.kmer), self.data["heldout"])
        images = in_data_units(images, self.spec.scale)
        if self.spec.scale > 1:  # the clamp kept only the signs: the thresholded samples are exact, nothing else is
            hard = (images > 0.5).float()
            return {"fd_thresholded": M.frechet_distance_features(M.extract_features(self.net, hard), self.ref)}
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
