"""Integer rounding shared by the image size rules (mmdet's padding, libjpeg's reduced sizes)."""


def ceil_div(size: int, denom: int) -> int:
    """``size / denom`` rounded up (libjpeg's side length at 1/denom scale)."""
    return -(-size // denom)


def padded_size(size: int, divisor: int) -> int:
    """``size`` rounded up to a multiple of ``divisor`` (mmdet's pad_size_divisor rule)."""
    return ceil_div(size, divisor) * divisor
