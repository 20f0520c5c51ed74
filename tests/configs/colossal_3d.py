# Colossal-AI's config: pipeline + 3-D tensor parallelism (a 2 x 2 x 2 cube).
from colossalai.amp import AMP_TYPE

BATCH_SIZE = 24
parallel = dict(
    pipeline=2,
    tensor=dict(size=8, mode='3d'),
)
fp16 = dict(mode=AMP_TYPE.NAIVE)
