"""COCO RLE as it appears in annotation files: two json forms, one compressed string."""
from pycocotools import mask as mask_utils


def compressed_rle_counts(rle: dict) -> str:
    """COCO's compressed counts string of an RLE given in either json form (``counts`` a list of
    run lengths, or already a compressed str/bytes), ``size`` = [height, width]."""
    counts = rle['counts']
    if isinstance(counts, list):
        height, width = rle['size']
        counts = mask_utils.frPyObjects(rle, height, width)['counts']
    return counts.decode('ascii') if isinstance(counts, bytes) else counts
