"""Integer rounding shared by the image size rules (mmdet's padding, libjpeg's reduced sizes)."""

# The scales libjpeg decodes a JPEG at almost for free (it skips DCT coefficients): 1/1, 1/2,
# 1/4, 1/8 (cv2.IMREAD_REDUCED_*_N).
JPEG_SCALE_DENOMS = (1, 2, 4, 8)


def ceil_div(size: int, denom: int) -> int:
    """``size / denom`` rounded up (libjpeg's side length at 1/denom scale)."""
    return -(-size // denom)


def padded_size(size: int, divisor: int) -> int:
    """``size`` rounded up to a multiple of ``divisor`` (mmdet's pad_size_divisor rule)."""
    return ceil_div(size, divisor) * divisor


def reduced_size(height: int, width: int, denom: int) -> tuple[int, int]:
    """The (height, width) a ``height`` x ``width`` JPEG decodes to at 1/``denom`` scale: the one
    place this rule is written in Python (libjpeg's, ``jdiv_round_up``)."""
    return ceil_div(height, denom), ceil_div(width, denom)
