"""How every figure is written: 150 dpi, a shared small-font style, 256-colour PNG files.

Shared by :mod:`.timeline` and :mod:`.matrix` so their figures look alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 150


def save_png(fig: Figure, path: Path | str) -> Path:
    """Draw once on the Agg canvas and write a 256-colour PNG: looks the same, a third of
    the bytes. Why not ``savefig``: it lays a constrained figure out by drawing it twice
    and encodes a full-colour PNG that would only be decoded again to quantize it; this
    draws once and encodes once (about 3× faster for a run's timeline)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.set_dpi(DPI)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    rgba = np.asarray(canvas.buffer_rgba())
    try:
        from PIL import Image
    except ImportError:  # Pillow comes with matplotlib, but stay correct without it
        fig.savefig(out, dpi=DPI, format="png")
        return out
    image = Image.fromarray(rgba[..., :3]).quantize(colors=256,
                                                    method=Image.Quantize.FASTOCTREE)
    image.save(out, format="PNG", compress_level=6, dpi=(DPI, DPI))
    return out


def style() -> dict[str, Any]:
    """rc settings for :func:`matplotlib.pyplot.rc_context`: small fonts, no top spine."""
    return {"font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8,
            "xtick.labelsize": 8, "ytick.labelsize": 8, "axes.spines.top": False}
