"""keras.layers: thin Python handles on C++ layers (weights and math live in C++), one module per
kind of layer as Keras groups them; base_layer.py has the base class and the registry."""
from mdtrain.keras.layers.base_layer import _BASE_KWARGS, _CLASSES, Layer, _core_layer, _shape_tuple, _wrap_core_layer
from mdtrain.keras.layers.core import Activation, Dense, Dropout, Flatten, Input, InputLayer, Masking, Reshape
from mdtrain.keras.layers.convolutional import (Conv1D, Conv1DTranspose, Conv2D, Conv2DTranspose, Convolution1D,
                                                Convolution1DTranspose, Convolution2D, Convolution2DTranspose,
                                                DepthwiseConv2D, SeparableConv2D, SeparableConvolution2D)
from mdtrain.keras.layers.pooling import (AveragePooling1D, AveragePooling2D, AvgPool1D, AvgPool2D,
                                          GlobalAveragePooling1D, GlobalAveragePooling2D, GlobalAvgPool1D,
                                          GlobalAvgPool2D, GlobalMaxPool1D, GlobalMaxPool2D, GlobalMaxPooling1D,
                                          GlobalMaxPooling2D, MaxPool1D, MaxPool2D, MaxPooling1D, MaxPooling2D)
from mdtrain.keras.layers.normalization import BatchNormalization, LayerNormalization, UnitNormalization
from mdtrain.keras.layers.activations import ELU, LeakyReLU, PReLU, ReLU, Softmax
from mdtrain.keras.layers.embedding import Embedding
from mdtrain.keras.layers.reshaping import (Cropping1D, Cropping2D, Identity, Permute, RepeatVector, UpSampling1D,
                                            UpSampling2D, ZeroPadding1D, ZeroPadding2D)
from mdtrain.keras.layers.merging import (Add, Average, Concatenate, Dot, Maximum, Minimum, Multiply, Subtract, add,
                                         average, concatenate, dot, maximum, minimum, multiply, subtract)
from mdtrain.keras.layers.regularization import (ActivityRegularization, GaussianDropout, GaussianNoise,
                                                SpatialDropout1D, SpatialDropout2D)
from mdtrain.keras.layers.recurrent import GRU, LSTM, Bidirectional, SimpleRNN, _Recurrent
from mdtrain.keras.layers.mask_propagation import mask_after
from mdtrain.keras.layers.pipeline_split import PipelineSplit
from mdtrain.keras.layers.preprocessing import (CategoryEncoding, CenterCrop, Hashing, IntegerLookup, Normalization,
                                               PreprocessingLayer, RandomContrast, RandomFlip, RandomRotation,
                                               RandomTranslation, RandomZoom, Rescaling, Resizing, StringLookup,
                                               TextVectorization)
