"""What the server tells about itself: Prometheus metrics, live statistics, the dashboard, traces and payload logs.

Modules, from what a request records to what a person sees:

- `metrics`: Prometheus series (ours, and Triton's `nv_*` names) at `/metrics`.
- `monitoring_config`: TensorFlow Serving's monitoring config file: where else metrics are served.
- `stats`: a rolling window of per-model latency, rate, errors, queue time and batch size.
- `dashboard`: the live dashboard page (`static/dashboard.html`) and the JSON it polls.
- `model_stats`: Triton's statistics extension (cumulative counts and times, memory per version).
- `tracing`: OpenTelemetry traces, when configured: a server span per request, its phases, a span per batch.
- `payload_log`: requests and responses as CloudEvents to a sink or a file, when configured, off the request path.
- `access_log`: uvicorn's access log as JSON lines, when turned on.
"""
