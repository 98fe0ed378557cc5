"""keras.layers.Embedding (C++: nn/embedding, ops/embedding)."""
import numpy as np

from mdtrain.keras._serialization import to_config
from mdtrain.keras.layers._arguments import _copy_config_attributes, _positive_int
from mdtrain.keras.layers.base_layer import _CLASSES, Layer, _core_layer


class Embedding(Layer):
    """keras.layers.Embedding: turns integer indices into rows of a trainable (input_dim, output_dim)
    table; inputs (batch, *shape) give outputs (batch, *shape, output_dim).

    Indices may come as any integer array (cast to int32, as Keras does) or as floats holding whole
    numbers; a float that is not a whole number, or an index outside [0, input_dim), is a ValueError
    naming the layer, the value and its position, raised before any step runs (Keras on TF truncates
    floats and fails inside the step). It must be a model's first layer: indices have no gradient.
    The table's gradient is dense (docs/layers.md). input_length (Keras 2) sets the input shape."""

    _reads_indices = True

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", embeddings_regularizer=None,
                 embeddings_constraint=None, mask_zero=False, weights=None, lora_rank=None, input_length=None,
                 activity_regularizer=None, **kwargs):
        input_dim = _positive_int(input_dim, "input_dim")
        output_dim = _positive_int(output_dim, "output_dim")
        if input_length is not None and "input_shape" not in kwargs and "batch_input_shape" not in kwargs:
            kwargs["input_shape"] = input_length if isinstance(input_length, (tuple, list)) else (input_length,)
        super().__init__(**kwargs)
        name = self._name
        if embeddings_constraint is not None:
            raise ValueError(f'Embedding "{name}": embeddings_constraint is not supported by mdtrain (no layer '
                             f"supports weight constraints yet), got {embeddings_constraint!r}")
        if not isinstance(mask_zero, (bool, np.bool_)):
            raise TypeError(f'Embedding "{name}": mask_zero must be True or False, got {mask_zero!r}')
        for arg, value in (("weights", weights), ("lora_rank", lora_rank),
                           ("activity_regularizer", activity_regularizer)):
            if value is not None:
                raise NotImplementedError(f'Embedding "{name}": {arg} is not supported yet')
        self._core = _core_layer("Embedding", {
            "name": name, "input_dim": input_dim, "output_dim": output_dim,
            "embeddings_initializer": to_config(embeddings_initializer, "initializer"),
            "embeddings_regularizer": to_config(embeddings_regularizer, "regularizer"),
            "mask_zero": bool(mask_zero)})
        self.input_length = input_length
        _copy_config_attributes(self, ("input_dim", "output_dim", "mask_zero"))

    @property
    def supports_masking(self):
        return self.mask_zero

    @property
    def embeddings(self):
        """The table, (input_dim, output_dim) (a copy, as get_weights returns)."""
        if not self.built:
            raise AttributeError("You must build the layer before accessing `embeddings`.")
        return self.get_weights()[0]

    def compute_mask(self, inputs, mask=None):
        """Keras's mask: inputs != 0 when mask_zero, else None (for layers that will read masks)."""
        if not self.mask_zero:
            return None
        return np.not_equal(np.asarray(inputs), 0)

    @classmethod
    def _wrap(cls, core_layer):
        layer = super()._wrap(core_layer)
        layer.input_length = None
        _copy_config_attributes(layer, ("input_dim", "output_dim", "mask_zero"))
        return layer


_CLASSES["Embedding"] = Embedding
