# Colossal-AI's config: pipeline + 2.5-D tensor parallelism (2 x 2 x depth 2).
from colossalai.amp import AMP_TYPE

BATCH_SIZE = 24
parallel = dict(
    pipeline=2,
    tensor=dict(size=8, mode='2.5d', depth=2),
)
fp16 = dict(mode=AMP_TYPE.NAIVE)
