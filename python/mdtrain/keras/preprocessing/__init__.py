"""keras.preprocessing (the part Keras 3 keeps: sequence.pad_sequences)."""
from mdtrain.keras.preprocessing import sequence

__all__ = ["sequence"]
