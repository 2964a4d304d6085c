# The main job with predicted masks kept as COCO RLE from the mask head to the metric:
# RLEFCNMaskHead pastes and encodes in one native call (no full-size masks), RLECocoMetric takes
# the RLEs as they are. Same training, same reported numbers as mask-rcnn_r18_fpn_toy-coco.py.
_base_ = ['mask-rcnn_r18_fpn_toy-coco.py']

model = dict(roi_head=dict(mask_head=dict(type='RLEFCNMaskHead')))
# cocoeval_backend='faster_coco_eval' (pip install faster-coco-eval) prints the same tables,
# several times faster.
val_evaluator = dict(type='RLECocoMetric')
test_evaluator = val_evaluator
