# Colossal-AI's config: pipeline + 1-D tensor parallelism on 4 devices.
from colossalai.amp import AMP_TYPE

BATCH_SIZE = 24
parallel = dict(
    pipeline=2,
    tensor=dict(size=4, mode='1d'),
)
fp16 = dict(mode=AMP_TYPE.NAIVE)
