"""Small encoded images (smooth noise, so JPEG has real content) for the decoder tests."""
import cv2
import numpy as np
import torch


def encoded_image(height: int, width: int, channels: int = 3, seed: int = 0,
                  ext: str = '.jpg') -> torch.Tensor:
    """A height x width image of ``channels`` channels, encoded as ``ext``: Tensor[N] uint8."""
    rng = np.random.default_rng(seed)
    img = cv2.GaussianBlur((rng.random((height, width, channels)) * 255).astype(np.uint8),
                           (5, 5), 0).reshape(height, width, channels)
    ok, data = cv2.imencode(ext, img)
    assert ok
    return torch.from_numpy(data.reshape(-1).copy())
