#!/usr/bin/env python
"""GPT-2: pipeline 2 x 1-D tensor 2 ('hybrid_parallel' tutorial)."""
from colossalai.amp import AMP_TYPE
from colossalai.zero.shard_utils import (TensorShardStrategy,
                                         BucketTensorShardStrategy)
import colossalai

BATCH_SIZE = 128
NUM_EPOCHS = 2
LEARNING_RATE = 3e-4
WEIGHT_DECAY = .3
SEQ_LEN = \
    1024
fp16 = dict(mode=AMP_TYPE.NAIVE)  # Colossal-AI's own amp
TENSOR_PARALLEL_SIZE = 2
TENSOR_PARALLEL_MODE = '1d'

parallel = dict(
    pipeline=2,
    tensor=dict(mode=TENSOR_PARALLEL_MODE, size=TENSOR_PARALLEL_SIZE),
)
gradient_accumulation = 4
clip_grad_norm = 1.0
