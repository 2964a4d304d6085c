"""``compressed_rle_counts`` against pycocotools' own compressed string, for both json forms."""
import numpy as np
import pytest
from pycocotools import mask as mask_utils

from mmdet_ext.structures.coco_rle import compressed_rle_counts


def _runs(mask: np.ndarray) -> list:
    """COCO's uncompressed counts: column-major run lengths, the first one of zeros."""
    flat = mask.flatten(order='F')
    edges = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate(([0], edges, [flat.size]))
    runs = np.diff(bounds).tolist()
    return runs if flat[0] == 0 else [0] + runs


@pytest.mark.parametrize('seed', range(4))
def test_every_form_gives_pycocotools_compressed_string(seed):
    rng = np.random.default_rng(seed)
    height, width = int(rng.integers(3, 40)), int(rng.integers(3, 40))
    mask = np.asfortranarray(rng.random((height, width)) < 0.4, dtype=np.uint8)
    mask[0, 0] = seed % 2  # a mask starting with a foreground pixel and one with background
    expected = mask_utils.encode(mask)['counts']
    assert isinstance(expected, bytes)
    size = [height, width]
    uncompressed = {'size': size, 'counts': _runs(mask)}
    assert mask_utils.decode(mask_utils.frPyObjects(uncompressed, height, width)).tolist() == \
        mask.tolist()
    for rle in (uncompressed, {'size': size, 'counts': expected},
                {'size': size, 'counts': expected.decode('ascii')}):
        counts = compressed_rle_counts(rle)
        assert type(counts) is str
        assert counts == expected.decode('ascii')
