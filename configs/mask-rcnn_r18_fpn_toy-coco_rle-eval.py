# The main job with predicted masks kept as COCO RLE from the mask head to the metric:
# RLEFCNMaskHead pastes and encodes in one native call (no full-size masks), RLECocoMetric takes
# the RLEs as they are. Same training, same reported numbers as mask-rcnn_r18_fpn_toy-coco.py.
_base_ = ['mask-rcnn_r18_fpn_toy-coco.py']

model = dict(roi_head=dict(mask_head=dict(type='RLEFCNMaskHead')))
# It evaluates on the fastest installed COCO evaluator that agrees with pycocotools
# (cocoeval_backend='auto', logged; docs/predicted_masks.md).
val_evaluator = dict(type='RLECocoMetric')
test_evaluator = val_evaluator
