parallel = dict(
    pipeline=2,
    tensor=dict(size=4, mode='1d'),
)
