"""LazyLVISV1Dataset against mmdet's LVISV1Dataset (with the lvis package, 0.5.3 from PyPI), on a
small LVIS-v1-shaped json written over the toy COCO images: images named by coco_url only,
categories in a shuffled, gapped id order with one unused, an image without annotations and a
small one (filter_cfg), an image whose stale file_name must be ignored."""
import json
import shutil

import cv2
import numpy as np
import pytest
import torch
from mmdet.datasets import LVISV1Dataset

from mmdet_ext.datasets import AnnotationFileError, LazyLVISV1Dataset
from mmdet_ext.datasets.annotation_store import open_store
from mmdet_ext.registry import DATASETS
from mmdet_ext.toy_data import make_toy_coco

pytest.importorskip('lvis', reason='the reference LVISV1Dataset needs lvis (tools/install_deps.sh)')

URL = 'http://images.cocodataset.org/'
# toy category id -> LVIS-style id and name (json order shuffled, ids not contiguous).
LVIS_CATS = [(4, 'ring', 9), (1, 'circle', 2), (3, 'triangle', 30), (2, 'rectangle', 5)]
UNUSED_CAT = (None, 'aerosol_can', 1)


def _lvis_category(cat_id: int, name: str) -> dict:
    return {'id': cat_id, 'name': name, 'synset': f'{name}.n.01', 'synonyms': [name],
            'def': f'a {name}', 'frequency': 'c', 'image_count': 1, 'instance_count': 1}


@pytest.fixture(scope='module')
def lvis_root(tmp_path_factory):
    """``<root>/annotations/lvis_v1_train.json`` over ``<root>/train2017/*.jpg``."""
    root = tmp_path_factory.mktemp('toy_lvis')
    make_toy_coco(root, num_train=6, num_val=1, seed=3)  # seed 3: a crowd region among them
    coco = json.loads((root / 'annotations' / 'instances_train.json').read_text())
    shutil.move(str(root / 'train'), str(root / 'train2017'))
    toy_to_lvis = {toy: lvis_id for toy, _, lvis_id in LVIS_CATS}
    images = []
    for image in coco['images']:
        lvis_image = {'id': image['id'] * 7 + 100, 'height': image['height'],
                      'width': image['width'], 'license': 1,
                      'coco_url': URL + 'train2017/' + image['file_name'],
                      'flickr_url': 'http://farm1.staticflickr.com/x.jpg',
                      'date_captured': '2013-11-14 17:02:52',
                      'neg_category_ids': [UNUSED_CAT[2]], 'not_exhaustive_category_ids': []}
        images.append(lvis_image)
    images[2]['file_name'] = 'no/such/file.jpg'  # mmdet names images by coco_url only
    # A small image (min_size) with one annotation and an image without annotations.
    small = np.full((40, 56, 3), 90, np.uint8)
    assert cv2.imwrite(str(root / 'train2017' / 'small.jpg'), small)
    images.insert(1, {'id': 5, 'height': 40, 'width': 56, 'coco_url': URL + 'train2017/small.jpg',
                      'neg_category_ids': [], 'not_exhaustive_category_ids': []})
    first = coco['images'][0]
    images.append({'id': 3, 'height': first['height'], 'width': first['width'],
                   'coco_url': URL + 'train2017/' + first['file_name'],
                   'neg_category_ids': [], 'not_exhaustive_category_ids': [2]})
    image_id = {image['id']: image['id'] * 7 + 100 for image in coco['images']}
    annotations = []
    for ann in coco['annotations']:
        lvis_ann = {'id': ann['id'] + 1000, 'image_id': image_id[ann['image_id']],
                    'category_id': toy_to_lvis[ann['category_id']], 'bbox': ann['bbox'],
                    'area': ann['area'], 'segmentation': ann['segmentation']}
        if ann.get('iscrowd'):
            lvis_ann['iscrowd'] = 1  # LVIS has none; kept to check ignore_flag
        annotations.append(lvis_ann)
    annotations.append({'id': 1, 'image_id': 5, 'category_id': 30, 'bbox': [4.0, 5.0, 20.0, 10.0],
                        'area': 200.0,
                        'segmentation': [[4.0, 5.0, 24.0, 5.0, 24.0, 15.0, 4.0, 15.0]]})
    assert any(a.get('iscrowd') for a in annotations)  # ignore_flag and RLE masks are covered
    categories = [_lvis_category(lvis_id, name) for _, name, lvis_id in LVIS_CATS]
    categories.insert(2, _lvis_category(UNUSED_CAT[2], UNUSED_CAT[1]))
    lvis = {'info': {'description': 'toy LVIS v1'}, 'licenses': [], 'images': images,
            'annotations': annotations, 'categories': categories}
    (root / 'annotations' / 'lvis_v1_train.json').write_text(json.dumps(lvis))
    return root


def _pair(root, pipeline=(), **kwargs):
    common = dict(data_root=str(root), ann_file='annotations/lvis_v1_train.json',
                  data_prefix=dict(img=''), pipeline=list(pipeline), **kwargs)
    return LazyLVISV1Dataset(**common), LVISV1Dataset(**common)


def _assert_same_data_info(ours, theirs):
    assert ours.keys() == theirs.keys()
    for key in ours.keys() - {'instances'}:
        assert ours[key] == theirs[key], key
    assert len(ours['instances']) == len(theirs['instances'])
    for mine, ref in zip(ours['instances'], theirs['instances']):
        assert mine.keys() == ref.keys()
        for key in ('bbox', 'bbox_label', 'ignore_flag'):
            assert mine[key] == ref[key], key
        if isinstance(ref['mask'], list):
            assert mine['mask'] == ref['mask']  # polygons: the json's floats, exactly
        else:  # RLE: the same runs (the store keeps the compressed form)
            from pycocotools import mask as mask_utils
            h, w = ours['height'], ours['width']
            decode = lambda m: mask_utils.decode(  # noqa: E731
                mask_utils.frPyObjects(m, h, w) if isinstance(m['counts'], list) else m)
            np.testing.assert_array_equal(decode(mine['mask']), decode(ref['mask']))


@pytest.mark.parametrize('kwargs', [
    dict(filter_cfg=dict(filter_empty_gt=True, min_size=32)),
    dict(filter_cfg=dict(filter_empty_gt=True, min_size=48)),
    dict(filter_cfg=None),
    dict(test_mode=True),
    dict(filter_cfg=dict(filter_empty_gt=True), validate=False),
])
def test_same_samples_as_mmdet_lvis_v1_dataset(lvis_root, kwargs):
    mmdet_kwargs = {k: v for k, v in kwargs.items() if k != 'validate'}
    ours = LazyLVISV1Dataset(data_root=str(lvis_root), ann_file='annotations/lvis_v1_train.json',
                             data_prefix=dict(img=''), pipeline=[], **kwargs)
    theirs = LVISV1Dataset(data_root=str(lvis_root), ann_file='annotations/lvis_v1_train.json',
                           data_prefix=dict(img=''), pipeline=[], **mmdet_kwargs)
    assert len(ours) == len(theirs) > 0
    assert ours.cat_ids == theirs.cat_ids and ours.cat2label == theirs.cat2label
    assert ours.metainfo == theirs.metainfo
    assert ours.METAINFO is LVISV1Dataset.METAINFO
    for idx in range(len(ours)):
        _assert_same_data_info(ours.get_data_info(idx), theirs.get_data_info(idx))


def test_filters_remove_what_they_should(lvis_root):
    unfiltered, _ = _pair(lvis_root, filter_cfg=None)
    ids = [unfiltered.get_data_info(i)['img_id'] for i in range(len(unfiltered))]
    # Without annotations: 3, and the toy set's own image 5 (5 * 7 + 100); under min_size=48:
    # the small image 5 (40x56), and the toy set's image 6 (56x28).
    without_annotations, small_images = {3, 135}, {5, 142}
    assert without_annotations | small_images <= set(ids)
    empty_gt, _ = _pair(lvis_root, filter_cfg=dict(filter_empty_gt=True))
    assert [empty_gt.get_data_info(i)['img_id'] for i in range(len(empty_gt))] == \
        [i for i in ids if i not in without_annotations]
    small, _ = _pair(lvis_root, filter_cfg=dict(filter_empty_gt=False, min_size=48))
    assert [small.get_data_info(i)['img_id'] for i in range(len(small))] == \
        [i for i in ids if i not in small_images]
    paths = {unfiltered.get_data_info(i)['img_path'] for i in range(len(unfiltered))}
    assert all('/train2017/' in p and 'no/such' not in p for p in paths)


def test_pipeline_samples_equal(lvis_root):
    # Transform objects, not registry names: the registry's scope is whatever earlier tests
    # left, and mmcv's LoadImageFromFile is not in mmdet's own registry under 'mmdet.'.
    from mmcv.transforms import LoadImageFromFile
    from mmdet.datasets.transforms import LoadAnnotations, PackDetInputs
    pipeline = [LoadImageFromFile(), LoadAnnotations(with_bbox=True, with_mask=True),
                PackDetInputs()]
    ours, theirs = _pair(lvis_root, pipeline, filter_cfg=dict(filter_empty_gt=True, min_size=32))
    assert len(ours) == len(theirs)
    for idx in range(len(ours)):
        mine, ref = ours[idx], theirs[idx]
        assert torch.equal(mine['inputs'], ref['inputs'])
        a, b = mine['data_samples'], ref['data_samples']
        for key in ('img_id', 'img_path', 'ori_shape', 'img_shape'):
            assert a.metainfo[key] == b.metainfo[key], key
        assert torch.equal(a.gt_instances.bboxes.tensor, b.gt_instances.bboxes.tensor)
        assert torch.equal(a.gt_instances.labels, b.gt_instances.labels)
        np.testing.assert_array_equal(a.gt_instances.masks.to_ndarray(),
                                      b.gt_instances.masks.to_ndarray())
        assert torch.equal(a.ignored_instances.bboxes.tensor, b.ignored_instances.bboxes.tensor)


def test_registered_and_built_from_config(lvis_root):
    dataset = DATASETS.build(dict(type='LazyLVISV1Dataset', data_root=str(lvis_root),
                                  ann_file='annotations/lvis_v1_train.json',
                                  data_prefix=dict(img=''), pipeline=[]))
    assert isinstance(dataset, LazyLVISV1Dataset) and len(dataset) > 0
    import mmdet_ext
    assert mmdet_ext.LazyLVISV1Dataset is LazyLVISV1Dataset


def test_coco_and_lvis_stores_of_one_json_are_kept_apart(tmp_path):
    data = {'images': [{'id': 1, 'height': 4, 'width': 4, 'file_name': 'a.jpg',
                        'coco_url': URL + 'val2017/a.jpg'}],
            'annotations': [], 'categories': [_lvis_category(1, 'ring')]}
    path = tmp_path / 'both.json'
    path.write_text(json.dumps(data))
    lvis_store = open_store(str(path), image_names='coco_url')
    coco_store = open_store(str(path))
    assert (lvis_store.file_name(0), coco_store.file_name(0)) == ('val2017/a.jpg', 'a.jpg')
    assert lvis_store.path != coco_store.path and lvis_store.key != coco_store.key
    assert open_store(str(path), image_names='coco_url').path == lvis_store.path
    with pytest.raises(ValueError, match='image_names'):
        open_store(str(path), image_names='flickr_url')


def test_an_image_without_coco_url_names_the_file(tmp_path):
    data = {'images': [{'id': 1, 'height': 4, 'width': 4, 'coco_url': URL + 'a.jpg'},
                       {'id': 2, 'height': 4, 'width': 4, 'file_name': 'b.jpg'}],
            'annotations': [], 'categories': [_lvis_category(1, 'ring')]}
    path = tmp_path / 'lvis.json'
    path.write_text(json.dumps(data))
    with pytest.raises(AnnotationFileError, match=r'lvis\.json: images\[1\] has "coco_url"'):
        LazyLVISV1Dataset(ann_file=str(path), data_prefix=dict(img=''), pipeline=[],
                          validate=False, test_mode=True).full_init()


def test_images_named_by_url_stay_regular_and_both_readers_agree(lvis_root, tmp_path,
                                                                 monkeypatch):
    """The native columns hold LVIS images as regular ones (so validation never re-reads their
    annotations), and the Python reader (a build without rapidjson) makes the same store and the
    same report, irregular records included."""
    from mmdet_ext.datasets import annotation_store
    from mmdet_ext.datasets.coco_columns import read_columns
    data = json.loads((lvis_root / 'annotations' / 'lvis_v1_train.json').read_text())
    data['images'].append({'id': 'x', 'height': 4, 'width': 4, 'coco_url': URL + 'x.jpg'})
    data['images'].append({'id': 77, 'height': 0, 'width': 4, 'coco_url': URL + 'y.jpg'})
    data['images'].append({'id': 78, 'height': 4, 'width': 4, 'coco_url': URL + '\udcff.jpg'})
    path = lvis_root / 'annotations' / 'odd_lvis.json'
    path.write_text(json.dumps(data))
    columns = read_columns(str(path), record_starts=True, image_names='coco_url')
    assert sorted(columns.irregular_images) == [len(data['images']) - 3 + i for i in range(3)]
    assert columns.cols['img_irregular'][:-3].sum() == 0
    validation = dict(img_prefix=str(lvis_root) + '/', mask_root=str(lvis_root), policy={},
                      max_pixels=1 << 26)
    stores, reports = {}, {}
    for reader in ('native', 'python'):
        monkeypatch.setenv(annotation_store.JSON_READER_ENV, reader)
        store = open_store(str(path), str(tmp_path / reader), validation=validation,
                           image_names='coco_url')
        stores[reader] = store
        reports[reader] = open(store.path + annotation_store.PROBLEMS_SUFFIX).read()
    native, python = stores['native'], stores['python']
    assert reports['native'] == reports['python'] and 'image_record_invalid' in reports['native']
    checked = {annotation_store.CHECKED_FILES, annotation_store.CHECKED_STATES}
    assert set(native.arrays) == set(python.arrays)
    for name in set(native.arrays) - {annotation_store.JSON_IDENTITY}:
        np.testing.assert_array_equal(native[name], python[name], err_msg=name)
    assert checked <= set(native.arrays)
    names = {native.file_name(row) for row in range(native.num_images)}
    assert 'train2017/small.jpg' in names and not any(n.startswith('http') for n in names)


def test_batched_fetch_gives_the_per_sample_samples(lvis_root):
    """LazyLVISV1Dataset inherits the batched fetch (tests/test_batched_fetch.py): the same
    samples, images of several sizes (the small one included) decoded in one call."""
    from mmdet.datasets.transforms import PackDetInputs

    from mmdet_ext import LoadLazyAnnotations, NativeLoadResizeFlip
    from mmdet_ext.transforms import DEFERRED_META_KEYS

    def dataset(**kwargs):
        pipeline = [LoadLazyAnnotations(with_bbox=True, with_mask=True),
                    NativeLoadResizeFlip(scale=(1333, 800), keep_ratio=True, prob=0.5,
                                         pixels_on='device'),
                    PackDetInputs(meta_keys=DEFERRED_META_KEYS)]
        return LazyLVISV1Dataset(data_root=str(lvis_root),
                                 ann_file='annotations/lvis_v1_train.json',
                                 data_prefix=dict(img=''), pipeline=pipeline, **kwargs)

    batched, reference = dataset(), dataset(batched_fetch=False)
    indices = list(range(len(batched)))[::-1]
    np.random.seed(5)
    samples = batched.__getitems__(indices)
    np.random.seed(5)
    expected = [reference[i] for i in indices]
    # Deferred: the inputs are the decoded images, the toy ones and the small one.
    assert {tuple(s['inputs'].shape) for s in samples} == \
        {(3, image['height'], image['width']) for image in json.loads(
            (lvis_root / 'annotations' / 'lvis_v1_train.json').read_text())['images']
        } >= {(3, 240, 320), (3, 320, 240), (3, 40, 56)}
    assert len({s['inputs'].untyped_storage().data_ptr() for s in samples}) == 1
    for mine, ref in zip(samples, expected):
        assert torch.equal(mine['inputs'], ref['inputs'])
        a, b = mine['data_samples'], ref['data_samples']
        assert a.metainfo.keys() == b.metainfo.keys()
        for key in ('img_id', 'img_path', 'ori_shape', 'img_shape', 'flip_direction',
                    'pending_warp'):
            assert a.metainfo[key] == b.metainfo[key], key
        np.testing.assert_array_equal(a.metainfo['scale_factor'], b.metainfo['scale_factor'])
        for field in ('gt_instances', 'ignored_instances'):
            assert torch.equal(a.get(field).bboxes.tensor, b.get(field).bboxes.tensor)
            assert torch.equal(a.get(field).labels, b.get(field).labels)
            np.testing.assert_array_equal(a.get(field).masks.to_ndarray(),
                                          b.get(field).masks.to_ndarray())
