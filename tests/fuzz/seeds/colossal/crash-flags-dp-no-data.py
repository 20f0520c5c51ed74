dep=3
parallel =dict(
)
