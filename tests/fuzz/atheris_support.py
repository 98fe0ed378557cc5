"""What the atheris (libFuzzer for Python) targets share: instrumenting a reader's own code and
running the fuzzer over a scratch file that is removed however the run ends."""
import inspect
import os
import sys
import tempfile

import atheris


def instrument(*modules):
    """Coverage from the readers' own functions and methods (instrumenting NumPy and mdtrain whole
    takes minutes)."""
    for module in modules:
        for name, obj in list(vars(module).items()):
            if inspect.isfunction(obj) and obj.__module__ == module.__name__:
                setattr(module, name, atheris.instrument_func(obj))
            elif inspect.isclass(obj) and obj.__module__ == module.__name__:
                for attr, member in list(vars(obj).items()):
                    if inspect.isfunction(member):
                        setattr(obj, attr, atheris.instrument_func(member))


def scratch_path(prefix, name):
    """A file path in a new private directory: where each input is written before it is read."""
    return os.path.join(tempfile.mkdtemp(prefix=prefix), name)


def fuzz(test_one_input, path):
    """Runs libFuzzer on test_one_input with sys.argv's flags, then removes the scratch file and
    its directory."""
    try:
        atheris.Setup(sys.argv, test_one_input)
        atheris.Fuzz()
    finally:
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(os.path.dirname(path))
