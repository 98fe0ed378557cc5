"""tf.data.Options: settings a pipeline carries (with_options), with TF's names. mdtrain's
pipelines are deterministic and gather in one C++ thread, so most settings are recorded and read
back rather than acted on; an unknown name is an AttributeError, as in TF."""
import enum


class AutoShardPolicy(enum.IntEnum):
    """tf.data.experimental.AutoShardPolicy."""
    OFF = -1
    AUTO = 0
    FILE = 1
    DATA = 2
    HINT = 3


class _OptionsGroup:
    _defaults = {}

    def __init__(self):
        for name, value in self._defaults.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "_set", set())

    def __setattr__(self, name, value):
        if name not in self._defaults:
            raise AttributeError(f"{type(self).__name__} has no option {name!r}; the options are "
                                 f"{', '.join(sorted(self._defaults))}")
        object.__setattr__(self, name, value)
        self._set.add(name)

    def _merge_from(self, other):
        for name in other._set:
            value = getattr(other, name)
            if isinstance(value, _OptionsGroup):
                getattr(self, name)._merge_from(value)
            else:
                setattr(self, name, value)

    def __eq__(self, other):
        return type(self) is type(other) and all(getattr(self, n) == getattr(other, n) for n in self._defaults)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in sorted(self._defaults))})"


class DistributeOptions(_OptionsGroup):
    """tf.data.experimental.DistributeOptions."""
    _defaults = {"auto_shard_policy": AutoShardPolicy.AUTO, "num_devices": None}


class ThreadingOptions(_OptionsGroup):
    """tf.data.ThreadingOptions."""
    _defaults = {"max_intra_op_parallelism": None, "private_threadpool_size": None}


class OptimizationOptions(_OptionsGroup):
    """tf.data.experimental.OptimizationOptions."""
    _defaults = {"apply_default_optimizations": None, "map_and_batch_fusion": None, "map_parallelization": None,
                 "parallel_batch": None, "shuffle_and_repeat_fusion": None}


class Options(_OptionsGroup):
    """tf.data.Options."""
    _defaults = {"deterministic": None, "experimental_deterministic": None, "experimental_slack": False,
                 "experimental_external_state_policy": None, "autotune": None}

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "experimental_distribute", DistributeOptions())
        object.__setattr__(self, "threading", ThreadingOptions())
        object.__setattr__(self, "experimental_optimization", OptimizationOptions())

    def __setattr__(self, name, value):
        if name in ("experimental_distribute", "threading", "experimental_optimization"):
            raise AttributeError(f"Options.{name} is a group of options: set its fields instead")
        super().__setattr__(name, value)

    def merge(self, options):
        """A new Options: these, with every option `options` set overriding them."""
        merged = Options()
        merged._merge_from_options(self)
        merged._merge_from_options(options)
        return merged

    def _merge_from_options(self, other):
        self._merge_from(other)
        for group in ("experimental_distribute", "threading", "experimental_optimization"):
            getattr(self, group)._merge_from(getattr(other, group))
