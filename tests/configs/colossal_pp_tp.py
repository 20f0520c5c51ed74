# Colossal-AI's config: pipeline + 1-D tensor parallelism (Megatron's),
# data parallelism inferred as world / (pipeline x tensor).
from colossalai.amp import AMP_TYPE

BATCH_SIZE = 24
NUM_EPOCHS = 1
TENSOR_PARALLEL_SIZE = 2

parallel = dict(
    pipeline=2,
    tensor=dict(size=TENSOR_PARALLEL_SIZE, mode='1d'),
)

fp16 = dict(mode=AMP_TYPE.NAIVE)
