"""keras.preprocessing.sequence.pad_sequences: the same function as keras.utils.pad_sequences."""
from mdtrain.keras.utils.sequence_utils import pad_sequences

__all__ = ["pad_sequences"]
