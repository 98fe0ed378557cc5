"""What a layer converter reads of a layer, from the same sources the .keras writer uses: the C++
layer's class name and Keras config (layer._core.config_json(), _keras_config.py), its weights in
get_weights() order with their names (layer._core.weight_names(), _keras_weights.py), and the
static shapes of its inputs and output (batch axis excluded)."""
import json


class LayerView:
    def __init__(self, layer, input_shapes):
        core = layer._core
        self.layer = layer
        self.name = layer.name
        self.class_name = core.class_name
        self.config = json.loads(core.config_json())
        self.weight_names = list(core.weight_names())
        self.weights = list(layer.get_weights())
        self.input_shapes = [tuple(s) for s in input_shapes]
        self.output_shape = tuple(core.output_shape)

    @property
    def input_shape(self):
        return self.input_shapes[0]

    def weight(self, short):
        """The weight named "<layer>/.../<short>", or None when the layer has none (no bias)."""
        for name, value in zip(self.weight_names, self.weights):
            if name.rsplit("/", 1)[-1] == short:
                return value
        return None

    def refuse(self, why):
        raise ValueError(f'layer "{self.name}" ({type(self.layer).__name__}) cannot be exported to ONNX: {why}')
