"""Rasterising many polygon instances at once, natively (pycocotools semantics, bit-exact)."""
from typing import Sequence

import numpy as np

from ..ops import pack_polygons, polygons_to_masks


def rasterize_polygons(instances: Sequence[list], height: int, width: int) -> np.ndarray:
    """Masks of polygon instances, exactly as ``PolygonMasks.to_ndarray`` (pycocotools'
    ``frPyObjects`` + ``merge`` + ``decode``), in one native call.

    Args:
        instances: per instance, a list of parts (ndarray ``[x0, y0, x1, y1, ...]``, pixels).
        height, width: output size in pixels.

    Returns:
        ndarray[N, height, width] uint8 (0/1).
    """
    return polygons_to_masks(*pack_polygons(instances), height, width).numpy()
