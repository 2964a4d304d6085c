# The embedded toy dataset (python tools/make_toy_coco.py writes it to data/toy_coco/).
_base_ = 'mmdet::_base_/datasets/coco_instance.py'

dataset_type = 'LazyCocoDataset'  # mmdet_ext: annotations in a shared, memory-mapped store
data_root = 'data/toy_coco/'
metainfo = dict(classes=('circle', 'rectangle', 'triangle', 'ring'))
image_scale = (320, 240)

# mmdet_ext's native pipeline: annotations stay compact (LazyInstanceMasks), the image is decoded,
# resized and flipped in C++ (NativeLoadResizeFlip = LoadImageFromFile + Resize + RandomFlip, same
# arguments; LazyCocoDataset's batched fetch does it for a whole batch in one native call), and
# fast_collate builds one padded uint8 batch in the worker.
train_pipeline = [
    dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=True),
    dict(type='NativeLoadResizeFlip', scale=image_scale, keep_ratio=True, prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='NativeLoadResizeFlip', scale=image_scale, keep_ratio=True),
    dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
# No pad_size_divisor here: the model's data_preprocessor holds the one (WorkerDefaultsHook hands
# it to the dataset, whose batched fetch allocates its batches padded to it).
collate = dict(type='fast_collate')
train_dataloader = dict(
    batch_size=4,
    num_workers=2,
    persistent_workers=True,
    collate_fn=collate,
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'),
        filter_cfg=dict(filter_empty_gt=True, min_size=8),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=4,
    num_workers=2,
    persistent_workers=True,
    collate_fn=collate,
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_val.json',
        data_prefix=dict(img='val/'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader

val_evaluator = dict(ann_file=data_root + 'annotations/instances_val.json')
test_evaluator = val_evaluator
