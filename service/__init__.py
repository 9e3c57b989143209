"""tensorgate's service layer: the HTTP server (TensorFlow Serving REST and the Open Inference
Protocol over a versioned model repository) and the `tensorgate` command.

Packages, in the order a request goes through them:

- `protocols`: the wire protocols (routes, body limits, codecs); they parse and delegate.
- `inference`: the data plane, dynamic batching and partial-run handles, independent of protocols.
- `repository`: the model repository on disk and the life cycle of its versions (config, archives,
  servables wrapping engine sessions, the manager).
- `observability`: Prometheus metrics, live statistics and the dashboard.

Beside them: `cli` (the `tensorgate` command) or `tfserving_cli` (`tensorflow_model_server`, TensorFlow
Serving's command line) -> `server` (uvicorn) -> `app` (the FastAPI app that wires everything), `settings` (every `TENSORGATE_*` knob), `auth` (bearer tokens) and `errors` (the
one table mapping errors to status codes).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("tensorgate")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"
