"""keras.distribution: device meshes, tensor layouts and the distributions that use them (Keras 3's
names; docs/model_parallel.md)."""
from mdtrain.keras.distribution.device_mesh import DeviceMesh, list_devices
from mdtrain.keras.distribution.distributions import (DataParallel, Distribution, ModelParallel, distribution,
                                                      set_distribution)
from mdtrain.keras.distribution.layout_map import LayoutMap
from mdtrain.keras.distribution.pipeline_parallel import PipelineParallel
from mdtrain.keras.distribution.tensor_layout import TensorLayout
from mdtrain.keras.distribution.wavefront_pipeline import WavefrontPipeline

__all__ = ["DataParallel", "DeviceMesh", "Distribution", "LayoutMap", "ModelParallel", "PipelineParallel", "TensorLayout",
           "WavefrontPipeline", "distribution", "list_devices", "set_distribution"]
