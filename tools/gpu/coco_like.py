"""Synthetic COCO-like instance annotations and Mask R-CNN positive ROIs, deterministic by seed.

Why synthetic: the GPU machine has no internet and COCO cannot be carried (64 MiB per call), so
the mask measurements use generated outlines with COCO's rough statistics at training size
(1333x800): about 7 instances per image, sizes from small to large (sqrt(area) 16-500 px),
outline points spaced like an annotator's clicks (more points on bigger objects, 8-250 per
part), and about one instance in six split into 2-3 parts (occluded objects).
"""
from dataclasses import dataclass

import numpy as np

Polygon = list  # list[np.ndarray]: the parts of one instance, each float64 [x0, y0, x1, y1, ...]


@dataclass
class AnnotatedImage:
    """One image's instances: ``polygons[i]`` is instance i, ``boxes`` float32 [N, 4] xyxy px."""

    height: int
    width: int
    polygons: list
    boxes: np.ndarray


def _outline(rng: np.random.Generator, centre: np.ndarray, radius: float) -> np.ndarray:
    """A star-shaped, non-self-intersecting outline: smooth radial noise around ``centre``."""
    perimeter = 2 * np.pi * radius
    points = int(np.clip(round(perimeter / 12), 8, 250))  # a click per ~12 px at 1333x800
    angles = np.sort(rng.uniform(0, 2 * np.pi, points))
    phases = rng.uniform(0, 2 * np.pi, 3)
    wobble = sum(0.15 / k * np.sin(k * angles + phase) for k, phase in zip((2, 3, 5), phases))
    radii = radius * (1 + wobble) * rng.uniform(0.9, 1.0, points)
    xy = centre + np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)
    return np.round(xy, 2).ravel()


def _instance(rng: np.random.Generator, height: int, width: int) -> Polygon:
    largest = min(500, 0.9 * min(height, width))  # sizes are for 1333x800; tiny images too
    radius = np.exp(rng.uniform(np.log(16), np.log(largest))) / 2
    centre = rng.uniform([radius, radius], [width - radius, height - radius])
    parts = [_outline(rng, centre, radius)]
    if rng.random() < 1 / 6:
        for _ in range(int(rng.integers(1, 3))):
            offset = rng.normal(0, radius, 2)
            parts.append(_outline(rng, centre + offset, radius * rng.uniform(0.2, 0.5)))
    for part in parts:  # COCO coordinates lie inside the image
        part[0::2] = np.clip(part[0::2], 0, width)
        part[1::2] = np.clip(part[1::2], 0, height)
    return parts


def _box(parts: Polygon) -> np.ndarray:
    xy = np.concatenate(parts).reshape(-1, 2)
    return np.concatenate([xy.min(0), xy.max(0)]).astype(np.float32)


def coco_like_images(num_images: int, height: int = 800, width: int = 1333,
                     seed: int = 0) -> list[AnnotatedImage]:
    """``num_images`` images of 4-10 polygon instances each."""
    rng = np.random.default_rng(seed)
    images = []
    for _ in range(num_images):
        polygons = [_instance(rng, height, width) for _ in range(int(rng.integers(4, 11)))]
        images.append(AnnotatedImage(height, width, polygons,
                                     np.stack([_box(parts) for parts in polygons])))
    return images


def positive_rois(image: AnnotatedImage, num_rois: int,
                  seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Proposals as the mask head sees its positives: a ground-truth box each, jittered.

    Returns:
        ``(bboxes float32 [num_rois, 4] xyxy px inside the image, inds int64 [num_rois])``,
        ``inds[i]`` the instance ``bboxes[i]`` is assigned to. Each side moves by about 5% of
        the box size (normal), which keeps the overlap with the assigned box near IoU 0.8, as
        the sampler's positives (IoU >= 0.5) mostly are.
    """
    rng = np.random.default_rng(seed)
    inds = rng.integers(0, len(image.polygons), num_rois)
    boxes = image.boxes[inds].astype(np.float64)
    size = np.tile(boxes[:, 2:] - boxes[:, :2], (1, 2))
    boxes = boxes + rng.normal(0, 0.05, boxes.shape) * size
    limits = np.array([image.width, image.height] * 2) - [1, 1, 0, 0]
    boxes[:, :2] = np.clip(boxes[:, :2], 0, limits[:2])
    boxes[:, 2:] = np.clip(np.maximum(boxes[:, 2:], boxes[:, :2] + 1), 0, limits[2:])
    return boxes.astype(np.float32), inds.astype(np.int64)
