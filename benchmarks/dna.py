"""DNA for the quality race: real Drosophila promoter regions, one-hot, and k-mer metrics (issue 6).

Data: ``extdata/dm3_upstream2000.fa.gz`` of Debian's ``r-bioc-biostrings`` (26 454 sequences of the
2000 bases upstream of each dm3 RefSeq transcription start, on the transcript's strand, so the
3' end of each sequence is next to the TSS). :func:`fasta_path` fetches it with
``apt-get download r-bioc-biostrings`` + ``dpkg-deb -x`` into ``benchmarks/.cache/dna`` (once).
:func:`load_sequences` upper-cases (the file soft-masks repeats in lower case), keeps the last
``length`` bases (next to the TSS), drops crops with anything but ACGT and removes duplicates
(the file has many: alternative transcripts share promoters).

Training: :func:`save_sequence_dataset` writes the sequences as a ``datasets`` folder that
``training_scripts/train_unconditional.py --sequence_column sequence`` trains on: one-hot in
{-1, 1} (:func:`diffusers_infonoise.data.one_hot_sequences`), Gaussian diffusion with diffusers'
``UNet1DModel``; samples decode by the argmax over the 4 channels.

Metrics against held-out sequences: the Fréchet distance of per-sequence k-mer spectra
(frequencies, k = 4, 5, 6; :func:`benchmarks.metrics.frechet_distance_features`, exact in the
low-rank case) and the Jensen-Shannon distance (base 2) between the pooled k-mer distributions.
"""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import numpy as np

from benchmarks.metrics import ensure_cache_dir, frechet_distance_features

__all__ = [
    "ALPHABET",
    "fasta_path",
    "read_fasta",
    "load_sequences",
    "split_sequences",
    "kmer_counts",
    "kmer_metrics",
    "kmer_alphabet",
    "kmer_tokens",
    "kmer_bases",
    "save_sequence_dataset",
    "save_image_dataset",
]

ALPHABET = "ACGT"
DEB_PACKAGE = "r-bioc-biostrings"
FASTA_MEMBER = "extdata/dm3_upstream2000.fa.gz"


def fasta_path(cache: Path | None = None) -> Path:
    """Path of ``dm3_upstream2000.fa.gz``; downloads and unpacks the Debian package on first use.

    Raises:
        FileNotFoundError: the package could not be downloaded or lacks the file (message says how).
    """
    folder = Path(cache) if cache else ensure_cache_dir("dna")
    found = sorted(folder.glob(f"x/**/{FASTA_MEMBER}"))
    if found:
        return found[0]
    debs = sorted(folder.glob(f"{DEB_PACKAGE}_*.deb"))
    if not debs:
        r = subprocess.run(["apt-get", "download", DEB_PACKAGE], cwd=folder, capture_output=True, text=True)
        debs = sorted(folder.glob(f"{DEB_PACKAGE}_*.deb"))
        if not debs:
            raise FileNotFoundError(f"apt-get download {DEB_PACKAGE} failed (run 'apt-get update' first?): {r.stderr.strip()[-500:]}")
    subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(folder / "x")], check=True)
    found = sorted(folder.glob(f"x/**/{FASTA_MEMBER}"))
    if not found:
        raise FileNotFoundError(f"{debs[-1]} has no {FASTA_MEMBER}")
    return found[0]


def read_fasta(path) -> list[tuple[str, str]]:
    """``[(header, sequence)]`` of a (gzipped) FASTA file."""
    opener = gzip.open if str(path).endswith(".gz") else open
    records, name, chunks = [], None, []
    with opener(path, "rt") as fh:
        for line in fh:
            line = line.strip()
            if line.startswith(">"):
                if name is not None:
                    records.append((name, "".join(chunks)))
                name, chunks = line[1:], []
            elif line:
                chunks.append(line)
    if name is not None:
        records.append((name, "".join(chunks)))
    return records


def load_sequences(length: int = 64, path=None) -> list[str]:
    """Unique ACGT crops of the last ``length`` bases (next to the TSS), in file order."""
    seen, out = set(), []
    for _, seq in read_fasta(path or fasta_path()):
        crop = seq[-length:].upper()
        if len(crop) != length or set(crop) - set(ALPHABET) or crop in seen:
            continue
        seen.add(crop)
        out.append(crop)
    return out


def split_sequences(seqs: list[str], heldout: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """A random held-out split of ``heldout`` sequences (fixed seed) and the rest for training."""
    perm = np.random.default_rng(seed).permutation(len(seqs))
    return [seqs[i] for i in perm[heldout:]], [seqs[i] for i in perm[:heldout]]


def encode(seqs: list[str]) -> np.ndarray:
    """(N, L) int8 codes 0..3 (A, C, G, T)."""
    lut = np.full(256, -1, np.int8)
    for i, c in enumerate(ALPHABET):
        lut[ord(c)] = i
    arr = np.frombuffer("".join(seqs).encode("ascii"), np.uint8).reshape(len(seqs), -1)
    codes = lut[arr]
    if (codes < 0).any():
        raise ValueError("sequences: only A, C, G, T are accepted")
    return codes


def kmer_counts(seqs: list[str], k: int) -> np.ndarray:
    """(N, 4^k) float64 per-sequence k-mer counts."""
    codes = encode(seqs).astype(np.int64)
    n, length = codes.shape
    idx = np.zeros((n, length - k + 1), np.int64)
    for j in range(k):
        idx = idx * 4 + codes[:, j : length - k + 1 + j]
    out = np.zeros((n, 4**k))
    np.add.at(out, (np.repeat(np.arange(n), idx.shape[1]), idx.ravel()), 1.0)
    return out


def _js_distance(p: np.ndarray, q: np.ndarray) -> float:
    p, q = p / p.sum(), q / q.sum()
    m = (p + q) / 2

    def kl(a, b):
        nz = a > 0
        return float((a[nz] * np.log2(a[nz] / b[nz])).sum())

    return float(np.sqrt(max(0.0, (kl(p, m) + kl(q, m)) / 2)))


def kmer_metrics(generated: list[str], reference: list[str], ks=(4, 5, 6)) -> dict:
    """``fd_k{k}``: Fréchet distance of per-sequence k-mer frequency spectra (generated vs reference);
    ``js_k{k}``: Jensen-Shannon distance (base 2) of the pooled k-mer distributions. Also the
    means over k (``fd``, ``js``)."""
    out = {}
    for k in ks:
        cg, cr = kmer_counts(generated, k), kmer_counts(reference, k)
        norm = cg.shape[1] and (len(generated[0]) - k + 1)
        out[f"fd_k{k}"] = frechet_distance_features(cg / norm, cr / norm)
        out[f"js_k{k}"] = _js_distance(cg.sum(0), cr.sum(0))
    out["fd"] = float(np.mean([out[f"fd_k{k}"] for k in ks]))
    out["js"] = float(np.mean([out[f"js_k{k}"] for k in ks]))
    return out


#: the letters k-mer tokens are written with (k = 2: 16 letters, k = 3: 64)
TOKEN_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def kmer_alphabet(k: int) -> str:
    """The alphabet of k-mer tokens: ``ACGT`` for k = 1, else the first 4^k of :data:`TOKEN_LETTERS`, the token of
    the k-mer with base codes (c_1, ..., c_k) (A, C, G, T = 0..3) being letter number Σ c_i·4^(k−i).

    Raises:
        ValueError: k not in 1..3."""
    if k not in (1, 2, 3):
        raise ValueError(f"k: accepted values are 1, 2 and 3 (4^k tokens up to 64), got {k!r}")
    return ALPHABET if k == 1 else TOKEN_LETTERS[: 4**k]


def kmer_tokens(seqs: list[str], k: int) -> list[str]:
    """Each sequence of bases as its non-overlapping k-mers, one letter of :func:`kmer_alphabet` each (the length must
    be a multiple of k). Raises ValueError otherwise, or for letters outside ACGT."""
    if any(len(s) % k for s in seqs):
        raise ValueError(f"seqs: every length must be a multiple of k = {k}")
    letters = np.frombuffer(kmer_alphabet(k).encode("ascii"), np.uint8)
    codes = encode(seqs).astype(np.int64)
    index = codes.reshape(len(seqs), -1, k) @ (4 ** np.arange(k - 1, -1, -1))
    return [row.tobytes().decode("ascii") for row in letters[index]]


def kmer_bases(tokens: list[str], k: int) -> list[str]:
    """The base sequences of k-mer token sequences (:func:`kmer_tokens` undone)."""
    alphabet = kmer_alphabet(k)
    bases = ["".join(ALPHABET[(i // 4 ** (k - 1 - j)) % 4] for j in range(k)) for i in range(len(alphabet))]
    table = {letter: kmer for letter, kmer in zip(alphabet, bases)}
    return ["".join(table[t] for t in seq) for seq in tokens]


def save_sequence_dataset(seqs: list[str], path) -> str:
    """Save sequences as a ``datasets`` ``save_to_disk`` folder (column ``sequence``) that
    ``train_unconditional.py --dataset_name PATH --sequence_column sequence`` trains on; returns the path."""
    import datasets

    datasets.Dataset.from_dict({"sequence": list(seqs)}).save_to_disk(str(path))
    return str(path)


def save_image_dataset(images: np.ndarray, path) -> str:
    """Save (N, H, W) uint8 images as a ``datasets`` ``save_to_disk`` folder (column ``image``, mode "L",
    lossless PGM bytes) that ``train_unconditional.py --dataset_name PATH`` loads; returns the path."""
    import datasets

    n, h, w = images.shape
    header = f"P5\n{w} {h}\n255\n".encode("ascii")
    ds = datasets.Dataset.from_dict(
        {"image": [{"bytes": header + im.tobytes(), "path": None} for im in images]},
        features=datasets.Features({"image": datasets.Image()}),
    )
    ds.save_to_disk(str(path))
    return str(path)
