"""keras.optimizers with Keras 3's defaults and update rules (the updates run in C++).

An optimizer object holds its configuration until compile(); afterwards its learning_rate and
iterations read (and write) the live optimizer that trains the model.
"""
import json

import numpy as np

from mdtrain import _core
from mdtrain.keras.optimizers import schedules
from mdtrain.keras.optimizers._learning_rate import LearningRateVariable
from mdtrain.keras.optimizers.schedules import LearningRateSchedule



# Hyperparameters Keras holds as floats (whatever value they have).
_FLOAT_HYPERPARAMETERS = frozenset({"momentum", "rho", "epsilon", "beta_1", "beta_2", "ema_momentum",
                                    "initial_accumulator_value", "weight_decay"})

class Optimizer:
    _class_name = None

    def __init__(self, learning_rate, weight_decay=None, clipnorm=None, clipvalue=None, global_clipnorm=None,
                 use_ema=False, ema_momentum=0.99, ema_overwrite_frequency=None, loss_scale_factor=None,
                 gradient_accumulation_steps=None, name=None, **hyperparameters):
        if use_ema:
            raise NotImplementedError(f"{type(self).__name__}: use_ema is not supported yet")
        if loss_scale_factor is not None or gradient_accumulation_steps is not None:
            raise NotImplementedError(f"{type(self).__name__}: loss_scale_factor and gradient_accumulation_steps "
                                      "are not supported yet")
        self._config = dict(hyperparameters, weight_decay=weight_decay, clipnorm=clipnorm, clipvalue=clipvalue,
                            global_clipnorm=global_clipnorm)
        if name is not None:
            self._config["name"] = name
        self._learning_rate = learning_rate
        self._standalone = _core.make_optimizer(json.dumps(self._full_config()))  # validates now
        self._model_core = None
        from mdtrain import distribute  # here: mdtrain.distribute imports the keras package

        # The strategy whose scope the optimizer was created in: its slots belong to that strategy's
        # replicas, so compiling a model of another strategy with it is refused (compile()).
        self._creation_strategy = distribute._current_scope()

    def _full_config(self):
        lr = self._learning_rate
        if isinstance(lr, LearningRateSchedule):
            lr = {"class_name": type(lr).__name__, "config": lr.get_config()}
        elif not isinstance(lr, (int, float)) or isinstance(lr, bool):
            raise TypeError(f"{type(self).__name__}: learning_rate must be a float or a LearningRateSchedule, got {lr!r}")
        return {"class_name": self._class_name, "config": dict(self._config, learning_rate=lr)}

    def _live(self):
        return self._model_core.optimizer() if self._model_core is not None else self._standalone

    def _attach(self, model_core):
        """Called by compile(): from now on this object reads the model's live optimizer."""
        self._model_core = model_core

    def _make_core(self):
        return _core.make_optimizer(json.dumps(self._full_config()))

    def _current_learning_rate(self):
        return self._live().learning_rate

    @property
    def learning_rate(self):
        """A scalar variable (LearningRateVariable): .numpy(), float(), .assign(), arithmetic."""
        return LearningRateVariable(self)

    @learning_rate.setter
    def learning_rate(self, value):
        if isinstance(value, LearningRateSchedule):
            raise TypeError(f"{type(self).__name__}: a LearningRateSchedule is given when the optimizer is created, "
                            "not assigned to learning_rate afterwards")
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{type(self).__name__}: learning_rate must be a number, got {value!r}") from None
        if self._model_core is not None:
            self._model_core.set_learning_rate(float(value))  # every replica's optimizer
        else:
            self._standalone.learning_rate = float(value)
        self._learning_rate = float(value)

    lr = learning_rate

    @property
    def iterations(self):
        """The number of steps applied, as an int64 scalar tensor (int(), ==, .numpy() work)."""
        from mdtrain._eager.tensor import wrap

        return wrap(np.asarray(self._live().iterations, dtype=np.int64))

    # ---- custom training loops (docs/eager.md) --------------------------------------------
    def apply_gradients(self, grads_and_vars, name=None, skip_gradients_aggregation=False, **kwargs):
        """One update of each variable from its gradient: [(gradient, variable), ...]. Gradients
        that are None are skipped with a warning. The C++ update fit runs, on the variables' values
        in place (a model's weights, or a tf.Variable's value). Returns iterations. `name` names
        nothing here (TF's op name); skipping the gradients' aggregation is refused."""
        aggregate = kwargs.pop("experimental_aggregate_gradients", True)
        if kwargs:
            raise TypeError(f"apply_gradients() got unexpected keyword arguments {sorted(kwargs)}")
        if skip_gradients_aggregation or not aggregate:
            raise NotImplementedError("apply_gradients: skip_gradients_aggregation=True / "
                                      "experimental_aggregate_gradients=False is not supported")
        from mdtrain._eager import keras_optimizers

        return keras_optimizers.apply_gradients(self, grads_and_vars)

    def apply(self, grads, trainable_variables=None):
        """Keras 3's apply(grads, trainable_variables): apply_gradients(zip(grads, variables))."""
        if trainable_variables is None:
            trainable_variables = self.__dict__.get("_built_variables")
            if trainable_variables is None:
                raise ValueError("apply: pass trainable_variables, or build() the optimizer with them first")
        return self.apply_gradients(zip(grads, trainable_variables))

    def build(self, var_list):
        """Keras 3's build(var_list): the variables later apply(grads) calls update."""
        self._built_variables = list(var_list)

    def minimize(self, loss, var_list, tape=None):
        """Computes the gradients of `loss` (a callable, or a tensor recorded by `tape`) with
        respect to var_list and applies them."""
        from mdtrain._eager.tape import GradientTape

        var_list = list(var_list() if callable(var_list) else var_list)
        if callable(loss):
            with GradientTape() as tape:
                value = loss()
        elif tape is None:
            raise ValueError("minimize: `tape` is required when `loss` is a tensor")
        else:
            value = loss
        grads = tape.gradient(value, var_list)
        return self.apply_gradients(zip(grads, var_list))

    @property
    def name(self):
        return json.loads(self._standalone.config_json())["config"].get("name", self._class_name.lower())

    def get_config(self):
        config = json.loads(self._live().config_json())["config"]
        # The C++ config has one number type, so 0.0 comes back as 0; Keras type-checks some of
        # these (SGD refuses an int momentum when it loads a .keras file).
        for key in _FLOAT_HYPERPARAMETERS.intersection(config):
            if isinstance(config[key], int) and not isinstance(config[key], bool):
                config[key] = float(config[key])
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        lr = config.get("learning_rate")
        if isinstance(lr, dict):
            config["learning_rate"] = getattr(schedules, lr["class_name"]).from_config(lr["config"])
        return cls(**config)

    @property
    def variables(self):
        state = self._model_core.optimizer_state() if self._model_core is not None else self._standalone.state()
        return [v for _, v in state]

    def __repr__(self):
        return f"<{type(self).__name__} learning_rate={self._current_learning_rate()}>"


class SGD(Optimizer):
    _class_name = "SGD"

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, **kwargs):
        super().__init__(learning_rate, momentum=momentum, nesterov=nesterov, **kwargs)


class Adam(Optimizer):
    _class_name = "Adam"

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, **kwargs):
        super().__init__(learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, amsgrad=amsgrad, **kwargs)


class AdamW(Optimizer):
    _class_name = "AdamW"

    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, **kwargs):
        super().__init__(learning_rate, weight_decay=weight_decay, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                         amsgrad=amsgrad, **kwargs)


class RMSprop(Optimizer):
    _class_name = "RMSprop"

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False, **kwargs):
        super().__init__(learning_rate, rho=rho, momentum=momentum, epsilon=epsilon, centered=centered, **kwargs)


class Adagrad(Optimizer):
    _class_name = "Adagrad"

    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7, **kwargs):
        super().__init__(learning_rate, initial_accumulator_value=initial_accumulator_value, epsilon=epsilon,
                         **kwargs)


_BY_NAME = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop, "adagrad": Adagrad}


def get(identifier):
    """An optimizer from a Keras name ('adam', 'sgd', ...) with default settings, or an Optimizer."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError(f"Could not interpret optimizer identifier: '{identifier}'. "
                             f"Known optimizers: {', '.join(sorted(_BY_NAME))}")
        return cls()
    raise TypeError(f"optimizer must be a name such as 'adam' or a keras Optimizer, got {identifier!r}")


__all__ = ["LearningRateVariable", "Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "schedules", "get"]
