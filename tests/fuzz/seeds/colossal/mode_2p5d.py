parallel = dict(tensor=dict(size=8, mode='2.5d', depth=2))
