parallel = {
    'pipeline': {'size': 2},
    "tensor": {'size': 8, 'mode': "1d",},
}
