"""keras.regularizers: L1, L2, L1L2 (penalties applied in C++ once per step)."""


class Regularizer:
    def get_config(self):
        return {}


class L1L2(Regularizer):
    def __init__(self, l1=0.0, l2=0.0):
        for name, v in (("l1", l1), ("l2", l2)):
            if not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"{type(self).__name__}: {name} must be a non-negative number, got {v!r}")
        self.l1, self.l2 = float(l1), float(l2)

    def get_config(self):
        return {"l1": self.l1, "l2": self.l2}


class L1(L1L2):
    def __init__(self, l1=0.01):
        super().__init__(l1=l1)

    def get_config(self):
        return {"l1": self.l1}


class L2(L1L2):
    def __init__(self, l2=0.01):
        super().__init__(l2=l2)

    def get_config(self):
        return {"l2": self.l2}


l1, l2, l1_l2 = L1, L2, L1L2


def get(identifier):
    if identifier is None or isinstance(identifier, (str, Regularizer)):
        return identifier
    raise ValueError(f"Could not interpret regularizer identifier: {identifier!r}")
