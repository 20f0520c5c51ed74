# pipeline only, dict form
parallel = dict(pipeline=dict(size=4))
