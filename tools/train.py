"""Train a detector: the same command line as MMDetection's tools/train.py.

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CHECKPOINT]] [--amp]
        [--auto-scale-lr] [--cfg-options k=v ...] [--launcher none|pytorch|slurm|mpi]

The checkout's entry point to ``python -m mmdet_ext.train`` (mmdet_ext/train.py), which an
installed wheel has as well.
"""
from mmdet_ext.engine.process_exit import run_and_exit
from mmdet_ext.train import main

if __name__ == '__main__':
    run_and_exit(main)
