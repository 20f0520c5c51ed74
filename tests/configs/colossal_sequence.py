# Colossal-AI's config: pipeline + legacy sequence parallelism (ring
# self-attention over 2 devices; parity runs it as its cp ring).
from colossalai.amp import AMP_TYPE

BATCH_SIZE = 8
SEQ_LEN = 64
parallel = dict(
    pipeline=2,
    tensor=dict(size=2, mode='sequence'),
)
