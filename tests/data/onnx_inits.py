"""The initializers of the small test models written by this folder's scripts
(mobile_cnn.py, seq_cnn.py): He-normal weights from one seeded generator, in the order
the script asks for them, and batch-norm parameter sets.

    from onnx_inits import bn, init, inits
    N("Conv", ["x", init("w1", (8, 3, 3, 3)), init("b1", (8,), 0.1)], ["c1"])
    graph = helper.make_graph(nodes, name, [x], [y], inits)
"""
import numpy as np
from onnx import numpy_helper

rng = np.random.default_rng(0)
inits = []


def init(name, shape, scale=None, value=None):
    """A float32 initializer (int64 where `value` is a list), He-normal unless scale or value is given."""
    if value is None:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        value = rng.normal(0, scale if scale is not None else np.sqrt(2.0 / fan_in), shape)
    inits.append(numpy_helper.from_array(np.asarray(value, np.float32 if not isinstance(value, list) else np.int64),
                                         name))
    return name


def bn(name, c):
    """BatchNormalization's scale, bias, mean and var for c channels."""
    return [init(name + ".scale", (c,), value=rng.uniform(0.5, 1.5, c)), init(name + ".bias", (c,), 0.1),
            init(name + ".mean", (c,), value=np.zeros(c)), init(name + ".var", (c,), value=np.ones(c))]
