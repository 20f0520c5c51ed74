layers = [1, -2, (3, 4.5e-1), {'a': [None, True, False]}, (), (5,), []]
NAME = 'gpt2 \'small\'\n'
parallel = dict(pipeline=(3), tensor=dict(size=1, mode=None))
scale = 2 ** 5
