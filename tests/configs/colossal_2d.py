# Colossal-AI's config: pipeline + 2-D tensor parallelism (SUMMA on 2 x 2).
from colossalai.amp import AMP_TYPE

BATCH_SIZE = 24
parallel = dict(
    pipeline=2,
    tensor=dict(size=4, mode='2d'),
)
fp16 = dict(mode=AMP_TYPE.NAIVE)
