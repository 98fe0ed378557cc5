"""Keras's mask propagation through a model's layers (C++: nn/sequence_mask, nn/layer_stack)."""
import json


from mdtrain.keras.layers.core import Masking
from mdtrain.keras.layers.recurrent import Bidirectional


_PASSES_MASK = ("Dense", "Dropout", "Activation", "LayerNormalization", "Identity", "ReLU", "LeakyReLU", "ELU",
                "PReLU", "UnitNormalization", "GaussianNoise", "GaussianDropout", "SpatialDropout1D",
                "SpatialDropout2D", "ActivityRegularization")


def mask_after(layer, mask_source):
    """Keras's mask propagation, as nn/layer_stack.cpp runs it: the name of the layer whose mask the
    output of `layer` carries, given the one its input carries (None: no mask). Embedding(mask_zero)
    and Masking make one; recurrent layers and Bidirectional read it and keep it with
    return_sequences; GlobalAveragePooling1D reads it and drops it; Dense, Dropout, Activation,
    LayerNormalization, Identity, ReLU, LeakyReLU, ELU, PReLU, UnitNormalization pass it on; the
    other layers drop it, as Keras's (Flatten, Reshape, ...). BatchNormalization and Softmax would
    use it in Keras (moments over the kept steps only; zero probabilities where masked): refused."""
    if getattr(layer, "mask_zero", False) or isinstance(layer, Masking):
        return layer.name
    if mask_source is None:
        return None
    if getattr(layer, "_would_read_mask", False):
        return mask_source if _returns_sequences(layer) else None
    name = type(layer).__name__
    if name == "BatchNormalization":
        raise NotImplementedError(f'BatchNormalization layer "{layer.name}" receives the mask of "{mask_source}": '
                                  "Keras would compute its moments over the unmasked steps only, which mdtrain "
                                  "does not do yet")
    if name == "Softmax":
        raise NotImplementedError(f'Softmax layer "{layer.name}" receives the mask of "{mask_source}": Keras would '
                                  "give the masked positions probability 0, which mdtrain does not do yet")
    return mask_source if name in _PASSES_MASK else None


def _returns_sequences(layer):
    if isinstance(layer, Bidirectional):
        return bool(json.loads(layer._core.config_json())["layer"]["config"].get("return_sequences", False))
    # GlobalAveragePooling1D reads the mask and returns no steps (Keras's compute_mask: None).
    return bool(getattr(layer, "return_sequences", False))
