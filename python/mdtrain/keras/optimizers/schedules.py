"""keras.optimizers.schedules: learning rates that depend on the step (evaluated in C++)."""
import json

from mdtrain import _core


class LearningRateSchedule:
    def get_config(self):
        raise NotImplementedError

    def __call__(self, step):
        config = {"class_name": type(self).__name__, "config": self.get_config()}
        return _core.schedule_value(json.dumps(config), int(step))

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class ExponentialDecay(LearningRateSchedule):
    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False, name="ExponentialDecay"):
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = decay_steps
        self.decay_rate = float(decay_rate)
        self.staircase = bool(staircase)
        self.name = name
        self(0)  # validates the arguments in C++

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "decay_rate": self.decay_rate, "staircase": self.staircase, "name": self.name}


class PiecewiseConstantDecay(LearningRateSchedule):
    def __init__(self, boundaries, values, name="PiecewiseConstant"):
        self.boundaries = list(boundaries)
        self.values = [float(v) for v in values]
        self.name = name
        self(0)

    def get_config(self):
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


class CosineDecay(LearningRateSchedule):
    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name="CosineDecay", **kwargs):
        if kwargs:
            raise NotImplementedError(f"CosineDecay: {sorted(kwargs)} not supported yet")
        self.initial_learning_rate = float(initial_learning_rate)
        self.decay_steps = decay_steps
        self.alpha = float(alpha)
        self.name = name
        self(0)

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "alpha": self.alpha, "name": self.name}
