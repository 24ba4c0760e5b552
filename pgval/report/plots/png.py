"""How every figure is written: 150 dpi, a shared small-font style, 256-colour PNG files.

Shared by :mod:`.timeline` and :mod:`.matrix` so their figures look alike.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

DPI = 150


def save_png(fig: Figure, path: Path | str) -> Path:
    """Save at DPI as a 256-colour PNG: looks the same, a third of the bytes (HTML inlines it)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=DPI, format="png")
    try:
        from PIL import Image

        buf.seek(0)
        with Image.open(buf) as im:
            im.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(
                out, format="PNG", optimize=True, dpi=(DPI, DPI))
    except ImportError:  # Pillow comes with matplotlib, but stay correct without it
        out.write_bytes(buf.getvalue())
    return out


def style() -> dict[str, Any]:
    """rc settings for :func:`matplotlib.pyplot.rc_context`: small fonts, no top spine."""
    return {"font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8,
            "xtick.labelsize": 8, "ytick.labelsize": 8, "axes.spines.top": False}
