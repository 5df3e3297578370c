"""Shared helpers of the runnable examples: output folder, the photograph, PSNR.

The photograph is scikit-image's ``camera`` (512 x 512, 8-bit grey), which
ships inside the scikit-image wheel (``skimage/data/camera.png``): reading it
downloads nothing.  Install the examples' packages with
``pip install 'tensorlang[examples]'``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def parser(name: str, doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python examples/{name}.py", description=doc.strip().split("\n\n")[0])
    p.add_argument("--out", default=f"tensorlang-out/{name}",
                   help=f"folder for the pictures (default: ./tensorlang-out/{name})")
    p.add_argument("--seed", type=int, default=0)
    return p


def out_dir(path) -> Path:
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def photograph(size: int) -> np.ndarray:
    """The camera photograph in [0, 1], block-averaged down to ``size`` x ``size`` (size divides 512)."""
    from skimage import data

    img = data.camera().astype(np.float64) / 255.0
    if 512 % size:
        raise SystemExit(f"--size must divide 512, got {size}")
    k = 512 // size
    return img.reshape(size, k, size, k).mean(axis=(1, 3))


def psnr(a, ref) -> float:
    """Peak signal-to-noise ratio in dB for images in [0, 1]."""
    return float(10 * np.log10(1.0 / np.mean((np.asarray(a) - ref) ** 2)))


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_gray(path: Path, img) -> None:
    pyplot().imsave(path, np.clip(img, 0, 1), cmap="gray", vmin=0, vmax=1)
