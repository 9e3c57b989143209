"""tensorgate's service layer: the HTTP server (TensorFlow Serving REST and the Open Inference
Protocol over a versioned model repository) and the `tensorgate` command."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tensorgate")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"
