"""model.export(filepath, format=...): a trained model for serving runtimes (docs/export.md).

format="onnx" writes an ONNX model of the inference graph (_model_graph.py builds it, one
converter module per layer family); it needs the `onnx` package, and onnxruntime runs the file.
format="tf_saved_model" (Keras's default) needs TensorFlow and is not written by mdtrain yet.
"""
import os

from mdtrain._atomic import atomic_path
from mdtrain.keras.export import _builder, _model_graph

FORMATS = ("onnx", "tf_saved_model")


def export(model, filepath, format="tf_saved_model", verbose=True, input_signature=None, **kwargs):
    """Keras 3's Model.export. For "onnx", kwargs may hold opset_version (17 by default, at least
    17 and at most what the installed onnx package knows)."""
    if format == "tf_saved_model":
        raise ValueError(f"export: format='tf_saved_model' (Keras's default) needs TensorFlow and Keras, which "
                         f"mdtrain does not use; it is not supported yet. Save the model as a .keras file "
                         f"(model.save('{os.path.splitext(os.fspath(filepath))[0]}.keras')) and export it with "
                         "keras.saving.load_model(...).export(...) where TensorFlow is installed, or use "
                         "format='onnx'")
    if format != "onnx":
        raise ValueError(f"export: unrecognized format={format!r}; supported: {', '.join(repr(f) for f in FORMATS)}")
    opset = kwargs.pop("opset_version", None)
    if kwargs:
        raise TypeError(f"export: unexpected keyword arguments {sorted(kwargs)} for format='onnx' (it takes "
                        "opset_version)")
    _builder.require_onnx()
    newest = _builder.onnx.defs.onnx_opset_version()
    opset = _builder.DEFAULT_OPSET if opset is None else opset
    if isinstance(opset, bool) or not isinstance(opset, int) or not _builder.MIN_OPSET <= opset <= newest:
        raise ValueError(f"export: opset_version must be an int from {_builder.MIN_OPSET} to {newest} (the installed "
                         f"onnx package's newest), got {opset!r}")
    if not model.built:
        raise ValueError(f"export: model '{model.name}' is not built yet; fit it, call it or call build() first")
    model._refresh_from_strategy()
    proto = _model_graph.to_onnx(model, opset, input_signature)
    filepath = os.fspath(filepath)
    with atomic_path(filepath) as tmp, open(tmp, "wb") as f:  # a reader sees the old file or the new one
        f.write(proto.SerializeToString())
    if verbose:
        print(f"Saved artifact at '{filepath}'.")
