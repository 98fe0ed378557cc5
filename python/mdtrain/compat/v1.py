"""tf.compat.v1: ConfigProto and GPUOptions, which TF 2 guides still pass to tf.distribute.Server
(TF's parameter-server tutorial's create_in_process_cluster). They only tune TF's own runtime
(its thread pools, device placement, GPU memory growth), which mdtrain does not have: they are
accepted, keep what is set on them, and change nothing. A field TF does not have is refused, as
TF's protocol buffers refuse it, so a misspelt option is not silently kept."""


class _Options:
    """A protocol-buffer-like record: the fields of _FIELDS, with their defaults."""

    _FIELDS = {}

    def __init__(self, **fields):
        for name, value in self._defaults().items():
            object.__setattr__(self, name, value)
        for name, value in fields.items():
            setattr(self, name, value)

    def _defaults(self):
        return {name: (default() if callable(default) else default) for name, default in self._FIELDS.items()}

    def __setattr__(self, name, value):
        if name not in self._FIELDS:
            raise AttributeError(f'Assignment not allowed (no field "{name}" in protocol message object).')
        object.__setattr__(self, name, value)

    def __repr__(self):
        changed = {k: v for k, v in vars(self).items() if v != self._defaults()[k]}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in changed.items())})"


class GPUOptions(_Options):
    """tf.compat.v1.GPUOptions: GPU memory options of TF's runtime (no effect here)."""

    _FIELDS = {"allow_growth": False, "per_process_gpu_memory_fraction": 0.0, "visible_device_list": "",
               "allocator_type": "", "force_gpu_compatible": False}


class ConfigProto(_Options):
    """tf.compat.v1.ConfigProto: TF runtime options (no effect here; mdtrain's threads are set with
    tf.config.threading, its devices with tf.config)."""

    _FIELDS = {"inter_op_parallelism_threads": 0, "intra_op_parallelism_threads": 0, "allow_soft_placement": False,
               "log_device_placement": False, "device_count": dict, "gpu_options": GPUOptions,
               "use_per_session_threads": False, "operation_timeout_in_ms": 0, "isolate_session_state": False}
