"""keras.layers.PipelineSplit: where a Sequential or Functional model is cut into pipeline stages
under ``keras.distribution.PipelineParallel`` (docs/pipeline.md). Elsewhere it does nothing: it is
an identity layer (a linear Activation), so the same model trains unchanged on one device. In a
Functional model it goes where one tensor crosses the graph (between residual blocks:
``x = PipelineSplit()(x)``); one inside a block is a ValueError naming it."""
from mdtrain.keras.layers.base_layer import _CLASSES, Layer, _core_layer


class PipelineSplit(Layer):
    """A stage boundary: the layers after it (up to the next split) form the next pipeline stage."""

    def __init__(self, activation="linear", **kwargs):
        # Its saved config is its core layer's, which names the linear activation: accepted back
        # when a .keras file is loaded; anything else would not be an identity.
        if activation != "linear":
            raise ValueError(f"PipelineSplit is an identity layer: activation must be 'linear', got {activation!r}")
        super().__init__(**kwargs)
        self._core = _core_layer("Activation", {"name": self._name, "activation": "linear"})


_CLASSES.update({"PipelineSplit": PipelineSplit})
