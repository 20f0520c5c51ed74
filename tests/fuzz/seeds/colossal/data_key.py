parallel = dict(
   data=1,
   pipeline=1,
   tensor=dict(size=2, mode='1d'),
)
