"""Deterministic synthetic COCO instance-segmentation dataset ("toy COCO").

Why: the plugin's data path (annotation store, mask decoding, transforms, training) needs a small
dataset that exercises every COCO segmentation form -- single and multi-part polygons, polygons with
holes, compressed and uncompressed crowd RLE, per-instance PNG masks -- and that a small model
trained from scratch learns in minutes. Nothing here may be downloaded, so it is generated.

Layout under the dataset root::

    train/000000.jpg ...                    JPEG images (quality 90)
    val/000000.jpg ...
    annotations/instances_{train,val}.json  polygons for instances, RLE for crowd regions
    annotations/instances_{train,val}_pngmasks.json
                                            same, but each instance has "mask_file" instead of
                                            "segmentation" (path relative to the root)
    masks/{train,val}/<image_id>_<ann_id>.png
                                            one (H, W) uint8 0/255 PNG per non-crowd instance

Categories (ids 1-4): circle, rectangle, triangle, ring; each has its own hue range. Crowd RLE
is compressed in train and uncompressed in val, so readers see both forms.

Unless a size is given, images cycle through ``IMAGE_KINDS`` by index, so any run of that many
images holds each branch the data path takes on image geometry and filtering: landscape,
portrait, square and wide images (aspect-ratio grouping), one image without objects
(``filter_empty_gt``) and one whose short side is under mmdet's usual ``min_size=32``.

Each image is built in three steps so that annotations are exact:

1. shapes (and sometimes one crowd cluster of dots) are rasterised in order into an int32 label map
   (0 = background, k = instance k), later shapes occluding earlier ones; thin background-coloured
   bars are then drawn over some shapes, splitting them into several parts;
2. the label map is cleaned (1 px slivers and instances under ``MIN_AREA`` go back to background);
3. the image is painted from the cleaned label map, so every annotation, derived from
   ``label_map == k``, is exactly the visible region of instance k.

Only numpy, OpenCV, pycocotools and the standard library are used, so this module imports without
the compiled extension.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from pycocotools import mask as mask_utils

CATEGORIES = ("circle", "rectangle", "triangle", "ring")
# OpenCV hue (0..179) range per category id; circles wrap around red.
HUE_RANGES = {1: (-8, 8), 2: (50, 72), 3: (100, 125), 4: (20, 32)}
SPLITS = ("train", "val")
MIN_AREA = 30  # px; smaller visible regions are not annotated (and not painted)
SIZE_RANGE = (20.0, 110.0)  # px; shape diameter / long side
CROWD_PROBABILITY = 0.25
BAR_PROBABILITY = 0.4
JPEG_QUALITY = 90
# (width, height, has objects) of image i when make_toy_coco gets no size, cycled by index.
IMAGE_KINDS = (
    (320, 240, True),  # landscape
    (240, 320, True),  # portrait
    (288, 288, True),  # square
    (384, 216, True),  # wide
    (320, 240, False),  # no objects: no annotations
    (56, 28, True),  # short side 28: under min_size=32
)
# Written into "info"; a literal, not __name__, so the json does not depend on the import path.
GENERATOR = "mmdet_ext.toy_data"


@dataclass(frozen=True)
class _Item:
    """One drawn object before occlusion."""

    category_id: int
    mask: np.ndarray  # (H, W) uint8 in {0, 1}: the full shape, unoccluded
    colour: np.ndarray  # (3,) float BGR in [0, 255]
    centre: tuple[float, float]  # (x, y) px
    size: float  # px, extent used for shading and bars
    iscrowd: bool


def _hsv_to_bgr(hue: float, saturation: float, value: float) -> np.ndarray:
    hsv = np.array([[[round(hue) % 180, round(saturation), round(value)]]], dtype=np.uint8)
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[0, 0].astype(np.float64)


def _category_colour(rng: np.random.Generator, category_id: int) -> np.ndarray:
    """A saturated BGR colour in the category's hue range, so colour alone is a strong cue."""
    low, high = HUE_RANGES[category_id]
    return _hsv_to_bgr(rng.uniform(low, high), rng.uniform(150, 255), rng.uniform(130, 255))


def _background(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Textured background, (H, W, 3) float32 BGR: grey-ish gradient + low-frequency noise + lines.

    Low saturation keeps shapes separable by colour; the texture and random-coloured lines keep
    the task from being a plain colour threshold.
    """
    angle = rng.uniform(0, 2 * np.pi)
    xs, ys = np.arange(width, dtype=np.float32), np.arange(height, dtype=np.float32)
    ramp = xs[None, :] * np.float32(np.cos(angle)) + ys[:, None] * np.float32(np.sin(angle))
    ramp = (ramp - ramp.min()) / max(float(np.ptp(ramp)), 1.0)
    start, end = (rng.uniform(50, 200) + rng.uniform(-25, 25, 3) for _ in range(2))
    grid = rng.normal(0, 1, (int(rng.integers(3, 9)), int(rng.integers(3, 9)), 3))
    noise = cv2.resize(grid.astype(np.float32), (width, height), interpolation=cv2.INTER_CUBIC)
    noise *= np.float32(rng.uniform(10, 30))
    image = start.astype(np.float32) + (end - start).astype(np.float32) * ramp[..., None] + noise
    for _ in range(int(rng.integers(2, 7))):
        p0 = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        p1 = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        colour = tuple(float(c) for c in rng.uniform(0, 255, 3))
        cv2.line(image, p0, p1, colour, int(rng.integers(1, 3)), cv2.LINE_AA)
    return image


def _polygon_mask(points: np.ndarray, height: int, width: int) -> np.ndarray:
    mask = np.zeros((height, width), np.uint8)
    cv2.fillPoly(mask, [np.round(points).astype(np.int32)], 1)
    return mask


def _shape_mask(
    rng: np.random.Generator,
    category_id: int,
    centre: tuple[float, float],
    size: float,
    height: int,
    width: int,
) -> np.ndarray:
    """Full (unoccluded) mask of one shape, (H, W) uint8 in {0, 1}; size is its diameter in px."""
    cx, cy = centre
    radius = size / 2
    if category_id == 1:
        mask = np.zeros((height, width), np.uint8)
        cv2.circle(mask, (round(cx), round(cy)), round(radius), 1, -1)
        return mask
    if category_id == 2:
        box = ((cx, cy), (size, size * rng.uniform(0.3, 1.0)), rng.uniform(0, 180))
        return _polygon_mask(cv2.boxPoints(box), height, width)
    if category_id == 3:
        angles = rng.uniform(0, 2 * np.pi) + np.arange(3) * 2 * np.pi / 3
        angles = angles + rng.uniform(-0.4, 0.4, 3)
        radii = radius * rng.uniform(0.6, 1.0, 3)
        points = np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], axis=1)
        return _polygon_mask(points, height, width)
    # Ring: keep the band at least 4 px thick so it survives occlusion and JPEG.
    inner = min(radius * rng.uniform(0.4, 0.65), radius - 4)
    mask = np.zeros((height, width), np.uint8)
    cv2.circle(mask, (round(cx), round(cy)), round(radius), 1, -1)
    cv2.circle(mask, (round(cx), round(cy)), round(inner), 0, -1)
    return mask


def _random_shape(rng: np.random.Generator, height: int, width: int) -> _Item:
    category_id = int(rng.integers(1, len(CATEGORIES) + 1))
    low, high = SIZE_RANGE
    # Rings below 30 px would have a hole too small to see.
    size = rng.uniform(30.0 if category_id == 4 else low, high)
    centre = (rng.uniform(0.1, 0.9) * width, rng.uniform(0.1, 0.9) * height)
    mask = _shape_mask(rng, category_id, centre, size, height, width)
    colour = _category_colour(rng, category_id)
    return _Item(category_id, mask, colour, centre, size, iscrowd=False)


def _random_crowd(rng: np.random.Generator, height: int, width: int) -> _Item:
    """A cluster of 8-20 small dots of one category's colour, annotated as one crowd region."""
    category_id = int(rng.integers(1, len(CATEGORIES) + 1))
    spread = rng.uniform(15, 35)
    centre = (rng.uniform(0.15, 0.85) * width, rng.uniform(0.15, 0.85) * height)
    mask = np.zeros((height, width), np.uint8)
    for _ in range(int(rng.integers(8, 21))):
        x, y = rng.normal(centre, spread / 2)
        cv2.circle(mask, (round(x), round(y)), int(rng.integers(2, 5)), 1, -1)
    colour = _category_colour(rng, category_id)
    return _Item(category_id, mask, colour, centre, 2 * spread, iscrowd=True)


def _draw_bar(
    rng: np.random.Generator, target: _Item, label_map: np.ndarray, background: np.ndarray
) -> None:
    """Cut a thin background-coloured bar through target's centre; the bar is not an instance."""
    cx, cy = target.centre
    angle = rng.uniform(0, np.pi)
    dx, dy = target.size * np.cos(angle), target.size * np.sin(angle)
    p0, p1 = (round(cx - dx), round(cy - dy)), (round(cx + dx), round(cy + dy))
    thickness = int(rng.integers(2, 6))
    bar = np.zeros(label_map.shape, np.uint8)
    cv2.line(bar, p0, p1, 1, thickness)
    x, y = int(rng.integers(0, label_map.shape[1])), int(rng.integers(0, label_map.shape[0]))
    label_map[bar > 0] = 0
    background[bar > 0] = background[y, x]


def _clean_label_map(label_map: np.ndarray, num_items: int) -> None:
    """Give 1 px wide slivers and regions under MIN_AREA px back to the background, in place.

    No polygon can represent a 1 px wide sliver, and a tiny region is not worth a label; since the
    image is painted from the label map afterwards, they simply never appear.
    """
    kernel = np.ones((2, 2), np.uint8)
    for k in range(1, num_items + 1):
        mask = (label_map == k).astype(np.uint8)
        # A 2x2 opening with mirrored anchors keeps exactly the pixels covered by a full 2x2 block.
        opened = cv2.dilate(cv2.erode(mask, kernel, anchor=(0, 0)), kernel, anchor=(1, 1))
        if opened.sum() < MIN_AREA:
            opened[:] = 0
        label_map[(mask > 0) & (opened == 0)] = 0


def _paint(
    rng: np.random.Generator, background: np.ndarray, label_map: np.ndarray, items: list[_Item]
) -> np.ndarray:
    """Paint each instance's visible pixels, shaded and noisy, over the background.

    Returns:
        (H, W, 3) uint8 BGR image.
    """
    image = background.copy()
    for k, item in enumerate(items, start=1):
        rows, cols = np.nonzero(label_map == k)
        angle = rng.uniform(0, 2 * np.pi)
        ramp = (cols - item.centre[0]) * np.cos(angle) + (rows - item.centre[1]) * np.sin(angle)
        shade = 1 + 0.2 * np.clip(ramp / (item.size / 2), -1, 1)
        noise = rng.normal(0, 5, (len(rows), 3))
        image[rows, cols] = item.colour * shade[:, None] + noise
    image += rng.standard_normal(image.shape, dtype=np.float32) * 3
    return np.clip(np.round(image), 0, 255).astype(np.uint8)


def _render_image(
    rng: np.random.Generator, height: int, width: int, with_objects: bool = True
) -> tuple[np.ndarray, np.ndarray, list[_Item]]:
    """Draw one image.

    Returns:
        image: (H, W, 3) uint8 BGR.
        label_map: (H, W) int32, 0 = background, k = items[k - 1]; regions of dropped items are 0.
        items: the drawn objects in drawing order (2-6 shapes, sometimes one crowd cluster; none
            without objects).
    """
    background = _background(rng, height, width)
    label_map = np.zeros((height, width), np.int32)
    if not with_objects:
        return _paint(rng, background, label_map, []), label_map, []
    items = [_random_shape(rng, height, width) for _ in range(int(rng.integers(2, 7)))]
    if rng.random() < CROWD_PROBABILITY:
        items.insert(int(rng.integers(0, len(items) + 1)), _random_crowd(rng, height, width))
    for k, item in enumerate(items, start=1):
        label_map[item.mask > 0] = k
    if rng.random() < BAR_PROBABILITY:
        shapes = [item for item in items if not item.iscrowd]
        _draw_bar(rng, shapes[int(rng.integers(0, len(shapes)))], label_map, background)
    _clean_label_map(label_map, len(items))
    return _paint(rng, background, label_map, items), label_map, items


def _signed_area(points: np.ndarray) -> float:
    x, y = points[:, 0], points[:, 1]
    return 0.5 * float(np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y))


def _push_to_pixel_edges(points: np.ndarray, outward: bool) -> np.ndarray:
    """Move a contour traced through boundary pixel centres onto the pixels' outer edges.

    OpenCV contours pass through the centres of the boundary pixels, so their area lacks about
    half a pixel all round (IoU ~0.7 for a 30 px region). Each edge moves by the mean offset of
    the pixel staircase it approximates, 0.5 * max(|nx|, |ny|) px along its unit normal n (0.5 px
    for axis-aligned edges), and each vertex to where its two moved edges meet (miter), capped at
    1 px for spikes. ``outward`` is False for hole contours, which move into the hole.

    Args:
        points: (N, 2) float, closed contour, no repeated consecutive points.
    Returns:
        (N, 2) float, the moved contour.
    """
    edges = np.roll(points, -1, axis=0) - points  # edge i goes from vertex i to i + 1
    normals = np.stack([edges[:, 1], -edges[:, 0]], axis=1)
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    # (ey, -ex) points out of the polygon when its signed area is positive.
    if (_signed_area(points) > 0) != outward:
        normals = -normals
    offsets = 0.5 * np.abs(normals).max(axis=1)
    n_in, n_out = np.roll(normals, 1, axis=0), normals  # edges before and after each vertex
    d_in, d_out = np.roll(offsets, 1), offsets
    det = n_in[:, 0] * n_out[:, 1] - n_in[:, 1] * n_out[:, 0]
    safe_det = np.where(np.abs(det) > 1e-3, det, 1.0)
    miter_x = (d_in * n_out[:, 1] - d_out * n_in[:, 1]) / safe_det
    miter_y = (n_in[:, 0] * d_out - n_out[:, 0] * d_in) / safe_det
    miter = np.stack([miter_x, miter_y], axis=1)
    # Collinear (or reversing) edges have no miter point: move along the mean normal instead.
    mean = 0.5 * (d_in[:, None] * n_in + d_out[:, None] * n_out)
    shift = np.where((np.abs(det) > 1e-3)[:, None], miter, mean)
    length = np.linalg.norm(shift, axis=1, keepdims=True)
    return points + shift * np.minimum(1.0, 1.0 / np.maximum(length, 1e-9))


def _keyhole(outer: np.ndarray, holes: list[np.ndarray]) -> np.ndarray:
    """Merge holes into one polygon by cutting from the nearest vertex to each hole and back.

    The cut is walked twice in opposite directions, so even-odd rasterisers (pycocotools) leave
    each hole empty; holes are walked against the outer orientation so non-zero rasterisers do too.

    Args:
        outer: (N, 2) float contour; holes: (M_i, 2) float contours lying inside it.
    Returns:
        (N + sum(M_i + 2), 2) float, one closed polygon.
    """
    polygon = outer
    outer_sign = np.sign(_signed_area(outer))
    for hole in holes:
        if np.sign(_signed_area(hole)) == outer_sign:
            hole = hole[::-1]
        distances = np.linalg.norm(polygon[:, None, :] - hole[None, :, :], axis=2)
        i, j = np.unravel_index(int(np.argmin(distances)), distances.shape)
        loop = np.concatenate([hole[j:], hole[: j + 1]])
        polygon = np.concatenate([polygon[: i + 1], loop, polygon[i:]])
    return polygon


def _contour_points(contour: np.ndarray) -> np.ndarray:
    points = contour.reshape(-1, 2).astype(np.float64)
    keep = np.any(points != np.roll(points, 1, axis=0), axis=1)
    return points[keep]


def mask_to_polygons(mask: np.ndarray) -> list[list[float]]:
    """COCO polygons of a binary mask: one polygon per connected part, holes keyholed in.

    Pixel-coordinate convention: pixel (col, row) covers [col, col + 1) x [row, row + 1), as
    pycocotools assumes when it rasterises. OpenCV's integer vertex (col, row) is a pixel centre,
    so vertices are pushed half a pixel out to the pixel edges (``_push_to_pixel_edges``), then
    shifted by +0.5. Measured IoU of pycocotools' rasterisation with the mask, mean over the 457
    instances of the earlier all-320x240 default set: 0.99999 (min 0.9995) this way; 0.976
    pushed without the +0.5; 0.872 / 0.891 for raw contour vertices with offset 0 / +0.5.

    Args:
        mask: (H, W) uint8, nonzero = foreground.
    Returns:
        list of flat [x0, y0, x1, y1, ...] lists in px, rounded to 0.01 px.
    """
    # RETR_CCOMP's top level is exactly RETR_EXTERNAL's output; its second level gives the holes.
    contours, hierarchy = cv2.findContours(mask, cv2.RETR_CCOMP, cv2.CHAIN_APPROX_SIMPLE)
    polygons = []
    for index, contour in enumerate(contours):
        _, _, first_child, parent = hierarchy[0][index]
        outer = _contour_points(contour)
        if parent != -1 or len(outer) < 3:
            continue
        holes = []
        child = first_child
        while child != -1:
            hole = _contour_points(contours[child])
            if len(hole) >= 3:
                holes.append(_push_to_pixel_edges(hole, outward=False))
            child = hierarchy[0][child][0]
        polygon = _keyhole(_push_to_pixel_edges(outer, outward=True), holes) + 0.5
        polygons.append([round(float(v), 2) for v in polygon.ravel()])
    return polygons


def compressed_rle(mask: np.ndarray) -> dict:
    """COCO compressed RLE of a (H, W) binary mask: {"size": [H, W], "counts": str}."""
    rle = mask_utils.encode(np.asfortranarray(mask, dtype=np.uint8))
    return {"size": [int(v) for v in rle["size"]], "counts": rle["counts"].decode("ascii")}


def uncompressed_rle(mask: np.ndarray) -> dict:
    """COCO uncompressed RLE: {"size": [H, W], "counts": [int]}, column-major runs, zeros first."""
    flat = mask.ravel(order="F") > 0
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    counts = np.diff(np.concatenate([[0], changes, [flat.size]])).tolist()
    if flat[0]:
        counts.insert(0, 0)
    return {"size": [int(mask.shape[0]), int(mask.shape[1])], "counts": counts}


# Both RLE forms exist in the dataset: compressed in train, uncompressed (COCO's crowd form) in val.
CROWD_RLE = {"train": compressed_rle, "val": uncompressed_rle}


def _tight_bbox(mask: np.ndarray) -> list[float]:
    """[x, y, w, h] in px of the nonzero pixels, w = max col - min col + 1."""
    rows, cols = np.nonzero(mask)
    x0, y0 = int(cols.min()), int(rows.min())
    return [float(x0), float(y0), float(cols.max() - x0 + 1), float(rows.max() - y0 + 1)]


def _annotation(
    ann_id: int, image_id: int, item: _Item, visible: np.ndarray, crowd_rle: Callable
) -> dict:
    """COCO annotation of one instance from its visible mask, (H, W) uint8 in {0, 1}."""
    segmentation = crowd_rle(visible) if item.iscrowd else mask_to_polygons(visible)
    return {
        "id": ann_id,
        "image_id": image_id,
        "category_id": item.category_id,
        "bbox": _tight_bbox(visible),
        "area": float(visible.sum()),
        "iscrowd": int(item.iscrowd),
        "segmentation": segmentation,
    }


def _split_summary(annotations: list[dict], num_images: int) -> dict:
    instances = [ann for ann in annotations if not ann["iscrowd"]]
    per_category = dict.fromkeys(CATEGORIES, 0)
    for ann in instances:
        per_category[CATEGORIES[ann["category_id"] - 1]] += 1
    return {
        "images": num_images,
        "instances": len(instances),
        "crowd": len(annotations) - len(instances),
        "per_category": per_category,
    }


def _write_split(
    root: Path,
    split: str,
    split_index: int,
    num_images: int,
    seed: int,
    size: tuple[int, int] | None,
) -> dict:
    """Write one split's images, PNG masks and both json variants; returns its summary."""
    (root / split).mkdir(parents=True, exist_ok=True)
    (root / "masks" / split).mkdir(parents=True, exist_ok=True)
    images, annotations, png_annotations = [], [], []
    for image_index in range(num_images):
        rng = np.random.default_rng([seed, split_index, image_index])
        width, height, with_objects = (
            IMAGE_KINDS[image_index % len(IMAGE_KINDS)] if size is None else (*size, True)
        )
        image, label_map, items = _render_image(rng, height, width, with_objects)
        image_id = image_index + 1
        file_name = f"{image_index:06d}.jpg"
        cv2.imwrite(str(root / split / file_name), image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        images.append({"id": image_id, "file_name": file_name, "width": width, "height": height})
        for k, item in enumerate(items, start=1):
            visible = (label_map == k).astype(np.uint8)
            if not visible.any():
                continue
            ann = _annotation(len(annotations) + 1, image_id, item, visible, CROWD_RLE[split])
            annotations.append(ann)
            if item.iscrowd:
                png_annotations.append(ann)
                continue
            mask_file = f"masks/{split}/{image_id}_{ann['id']}.png"
            cv2.imwrite(str(root / mask_file), visible * 255)
            png_ann = {key: value for key, value in ann.items() if key != "segmentation"}
            png_annotations.append({**png_ann, "mask_file": mask_file})
    summary = _split_summary(annotations, num_images)
    variants = (("json", "", annotations), ("png_json", "_pngmasks", png_annotations))
    for key, suffix, anns in variants:
        path = root / "annotations" / f"instances_{split}{suffix}.json"
        _write_json(path, _coco_dict(images, anns, seed, split))
        summary[key] = str(path)
    return summary


def _coco_dict(images: list[dict], annotations: list[dict], seed: int, split: str) -> dict:
    categories = [
        {"id": i, "name": name, "supercategory": "shape"}
        for i, name in enumerate(CATEGORIES, start=1)
    ]
    info = {"description": "toy COCO", "generator": GENERATOR, "seed": seed, "split": split}
    return {"info": info, "images": images, "annotations": annotations, "categories": categories}


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, separators=(",", ":")))


def make_toy_coco(
    out_dir: str | Path,
    num_train: int = 96,
    num_val: int = 24,
    seed: int = 0,
    width: int | None = None,
    height: int | None = None,
) -> dict:
    """Generate the toy COCO dataset under out_dir (layout in the module docstring).

    Every image has its own generator, seeded by (seed, split, index), so an image does not depend
    on the split sizes and the same arguments give byte-identical files.

    Args:
        out_dir: dataset root; created if missing, existing files are overwritten.
        num_train, num_val: number of images per split.
        seed: base seed.
        width, height: every image's size in px; both None (default): ``IMAGE_KINDS``.
    Returns:
        {"root": str, "train": summary, "val": summary}; a summary holds the paths of the two
        json files ("json", "png_json") and the counts "images", "instances" (non-crowd),
        "crowd" and "per_category" (non-crowd instances by category name).
    """
    if (width is None) != (height is None):
        raise ValueError(f"give both width and height or neither, got {width=}, {height=}")
    size = None if width is None else (width, height)
    root = Path(out_dir)
    counts = {"train": num_train, "val": num_val}
    summary = {"root": str(root)}
    for split_index, split in enumerate(SPLITS):
        summary[split] = _write_split(root, split, split_index, counts[split], seed, size)
    return summary
