parallel = dict(pipeline=1, tensor=dict(size=8, mode='3d'))
