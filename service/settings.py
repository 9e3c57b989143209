"""Server settings: every knob the server reads, from `TENSORGATE_*` environment variables or the CLI.

The engine never reads the environment; the server turns these settings into explicit option objects.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine import PlanOptions, SessionOptions
from engine.devices import parse_device, resolve_device
from service.inference.batching import BatchingOptions
from service.memory_limits import default_request_memory
from service.repository.archive import ArchiveLimits

__all__ = ["Settings", "is_loopback", "check_device_available"]

MiB = 1024 * 1024
GiB = 1024 * MiB


class Settings(BaseSettings):
    """Settings of one server process; `TENSORGATE_PORT=9000` sets `port`, and so on."""

    model_config = SettingsConfigDict(env_prefix="TENSORGATE_", extra="ignore")

    model_repository: Path = Path("models")
    """Directory holding `<model>/<version>/` (a GraphDef `model.pb`/`model.pbtxt`, or a SavedModel) and
    optional `<model>/config.yaml`. With `model_config_file`, served only when set explicitly."""

    model_config_file: Path | None = None
    """TensorFlow Serving's model config file (`--model_config_file`): a ModelServerConfig in protobuf
    text format listing models, each with its own base_path, version policy and labels. Its models are
    served beside the repository's (names must not clash), or alone when `model_repository` is not set."""

    model_config_file_poll_wait_seconds: float = Field(0.0, ge=0)
    """How often the model config file is read again, its changes applied (an invalid file keeps the
    last good one serving); 0 reads it once, at start, as TensorFlow Serving does."""

    model_base_path: Path | None = None
    """One model's base path (TensorFlow Serving's `--model_base_path`): a directory of numbered version
    directories, served as `model_name` with the latest version. Without `model_repository`, the only
    model served (as with `model_config_file`, which it cannot be combined with)."""

    model_name: str = "default"
    """The name `model_base_path`'s model is served under (TensorFlow Serving's `--model_name`)."""

    saved_model_tags: list[str] = Field(default_factory=lambda: ["serve"])
    """The tags of the MetaGraph loaded from each SavedModel (TensorFlow Serving's `--saved_model_tags`)."""

    allow_version_labels_for_unavailable_models: bool = True
    """A model config file's `version_labels` may name versions not available (yet): requests through such
    a label get 503/404 until the version loads. False (TensorFlow Serving's default, `tensorflow_model_server`
    without `--allow_version_labels_for_unavailable_models`): a server that loads its models before listening
    refuses to start when a label names a version that did not load."""

    host: str = "127.0.0.1"
    """Address to listen on. Beyond loopback, management needs `admin_token`."""

    port: int = Field(8000, ge=0, le=65535)
    """Port to listen on (0 picks a free one)."""

    grpc_port: int = Field(8001, ge=0, le=65535)
    """Port of the gRPC services (TensorFlow Serving's PredictionService and ModelService, KServe v2's
    GRPCInferenceService, health and reflection), on the same host as HTTP; 0 turns gRPC off."""

    http: bool = True
    """Serve HTTP (TensorFlow Serving REST, the Open Inference Protocol, metrics, the dashboard) on `port`;
    false leaves gRPC alone, as TensorFlow Serving's `--rest_api_port=0` does."""

    cors: bool = False
    """Answer CORS preflights and let any origin read HTTP responses (TensorFlow Serving's
    `--rest_api_enable_cors_support`), for browser clients on another origin. `cors_allow_origins` narrows it."""

    cors_allow_origins: list[str] = Field(default_factory=list)
    """Origins browsers may call the HTTP API from (`https://app.example.com`, or `*` for any), as a JSON list:
    CORS is on when it is set (or with `cors`: any origin). Preflights are answered on every route."""

    cors_allow_methods: list[str] = Field(default_factory=lambda: ["GET", "POST", "PUT", "DELETE"])
    """Methods a cross-origin request may use."""

    cors_allow_headers: list[str] = Field(default_factory=lambda: ["*"])
    """Request headers a cross-origin request may send (`*`: any, e.g. Authorization, Content-Type,
    Inference-Header-Content-Length, traceparent)."""

    cors_allow_credentials: bool = False
    """Whether browsers may send cookies or HTTP authentication with cross-origin requests (then the origins
    must be listed: a browser refuses credentials with `*`)."""

    cors_max_age_s: int = Field(600, ge=0)
    """How long a browser may cache a preflight's answer."""

    tracing: bool | None = None
    """OpenTelemetry traces of every request (`pip install 'tensorgate[otel]'`): a server span per REST or gRPC
    request, continuing the caller's W3C `traceparent`, with spans for decode, load, queue, compute, encode and
    one per batch. Unset: on when OpenTelemetry's variables name an exporter (`OTEL_EXPORTER_OTLP_ENDPOINT`,
    `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_TRACES_EXPORTER`); sampling and the exporter are theirs too."""

    tracing_endpoint: str | None = None
    """The OTLP traces URL (`http://collector:4318/v1/traces`), over `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`;
    setting it turns tracing on."""

    payload_log_url: str | None = None
    """Send inference requests and responses as CloudEvents (KServe's logger format) to this HTTP sink."""

    payload_log_file: Path | None = None
    """Append inference requests and responses as CloudEvents in JSON lines to this file."""

    payload_log_mode: Literal["request", "response", "all"] = "all"
    """Which payloads the log gets."""

    payload_log_sample_rate: float = Field(1.0, ge=0, le=1)
    """The fraction of requests logged (sampled at random, a request with both its events)."""

    payload_log_queue_size: int = Field(1000, ge=1)
    """Events waiting to be sent; past it new events are dropped (and counted), never the request."""

    payload_log_timeout_s: float = Field(2.0, gt=0)
    """How long sending one event to `payload_log_url` may take before it is dropped."""

    grpc_socket_path: Path | None = None
    """Also serve gRPC on this Unix domain socket (TensorFlow Serving's `--grpc_socket_path`)."""

    grpc_channel_arguments: str = ""
    """gRPC server arguments, `key=value` separated by commas (TensorFlow Serving's
    `--grpc_channel_arguments`, e.g. `grpc.max_connection_age_ms=2000`): integer values are passed as
    integers, others as strings."""

    grpc_ssl_config_file: Path | None = None
    """TensorFlow Serving's SSLConfig text proto (`--ssl_config_file`: server_key, server_cert, custom_ca,
    client_verify, the PEM texts inline): gRPC speaks TLS with them. Not with `grpc_tls_cert`."""

    grpc_alts: bool = False
    """gRPC with Google's ALTS credentials (`--use_alts_credentials`; on Google Cloud only)."""

    predict_tensor_content: bool = False
    """gRPC Predict replies carry numeric outputs packed in `tensor_content` (TensorFlow Serving's
    `--enable_serialization_as_tensor_content`: smaller and faster for large outputs) instead of the typed
    `*_val` fields, TensorFlow Serving's default, which clients reading `outputs["y"].float_val` expect."""

    grpc_tls_cert: Path | None = None
    """PEM certificate chain the gRPC port presents; with `grpc_tls_key`, gRPC speaks TLS only."""

    grpc_tls_key: Path | None = None
    """PEM private key of `grpc_tls_cert`."""

    grpc_tls_ca: Path | None = None
    """PEM CA bundle: when set, gRPC clients must present a certificate it signed (mutual TLS)."""

    tls_cert: Path | None = None
    """PEM certificate chain the HTTP port presents; with `tls_key`, HTTP is served over TLS (HTTPS) only."""

    tls_key: Path | None = None
    """PEM private key of `tls_cert`."""

    tls_ca: Path | None = None
    """PEM CA bundle: when set, HTTPS clients must present a certificate it signed (mutual TLS)."""

    poll_interval_s: float = Field(2.0, ge=0)
    """How often the repository is scanned for new, changed or removed versions; 0 turns hot reload off."""

    admin_token: SecretStr | None = None
    """Bearer token for management (upload, delete, labels, load/unload). Without it, management is
    allowed only while the server listens on loopback."""

    api_token: SecretStr | None = None
    """Bearer token for inference and metadata too, when set (the admin token is accepted as well)."""

    max_request_bytes: int = Field(64 * MiB, gt=0)
    """Largest request body accepted (after decompression); larger ones get 413. Uploads (the version
    upload and the v2 repository `load`) have their own limit, `max_upload_bytes`."""

    max_response_bytes: int = Field(64 * MiB, gt=0)
    """Largest response body sent; a response that would be larger is refused (413, naming its size and
    this limit) before it is encoded, never half-built in memory. gRPC responses are held to it too."""

    max_request_memory_bytes: int = Field(default_factory=lambda: default_request_memory(), gt=0)
    """Most memory one request's tensors may take: a kernel whose output size depends on the values
    or shapes a client sent (Fill, Tile, Range, BroadcastTo, Pad, OneHot, image decoders, string ops,
    ParseExample, broadcasting) checks the size first and refuses a larger one (413, naming the node,
    the size and this limit) instead of allocating it. Default: a quarter of the container's memory
    limit (cgroups), else of the machine's memory."""

    shutdown_grace_s: float = Field(20.0, ge=0)
    """On SIGTERM the server first fails its readiness probes (HTTP and gRPC health), stops accepting
    connections and finishes the requests in flight for at most this long, then exits. The chart's
    `terminationGracePeriodSeconds` must exceed it plus the preStop delay."""

    max_queued_requests: int = Field(default_factory=lambda: 64 * (os.cpu_count() or 1), ge=1)
    """Requests that may wait for an inference thread at once; past it, a request is refused at once
    with 503 and Retry-After (load shedding) rather than queued into a timeout. Batched models have
    their own queue (`batching_max_enqueued_batches`, 429)."""

    max_upload_bytes: int = Field(4 * GiB, gt=0)
    """Largest upload body accepted (after decompression), on the two upload routes only: the version
    upload (streamed to the repository's staging area, never held in memory) and the v2 repository
    `load` (base64 inside JSON, so held in memory); larger ones get 413. It bounds the archive as
    sent; `archive_max_bytes` bounds what an archive expands to, so an archive upload may stage up
    to the sum of the two on disk."""

    request_timeout_s: float = Field(60.0, gt=0)
    """Longest a request may take; a request may ask for less (v2 `timeout` parameter, microseconds)."""

    inference_threads: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1)
    """Threads running model work (decode, compute, encode) off the event loop."""

    kernel_threads: int | None = Field(None, ge=1)
    """Threads of the engine's kernel pool, which splits one large kernel (TensorFlow's intra-op
    parallelism); unset: one per available core."""

    inline_compute_us: float = Field(50.0, ge=0)
    """Requests whose plan measured at most this much compute (microseconds per run, averaged over
    its recent runs with the same input shapes) run on the event loop instead of a worker thread,
    which costs more than that; 0 sends every request to a worker."""

    load_threads: int = Field(2, ge=1)
    """Threads loading and warming up model versions in the background."""

    load_on_demand: bool = False
    """List every version the version policies want but load each on its first request (requests arriving
    during the load wait for it, up to their deadline); models whose config.yaml says `resident: true` load at
    once. For repositories of many models, most of them idle."""

    model_memory_bytes: int | None = Field(None, gt=0)
    """Memory budget for loaded model versions (each measured when it loads: weights, constants, compiled
    plans' buffers). Past it, the least recently used idle version is evicted, and loaded again by its next
    request; versions with requests in flight or waiting, and `resident: true` models, are never evicted.
    Unset: no budget (every wanted version stays loaded)."""

    model_idle_unload_s: float = Field(0.0, ge=0)
    """Unload versions that served no request for this many seconds (loaded again by their next request);
    0: never. `resident: true` models stay."""

    load_retries: int = Field(0, ge=0)
    """How many times a version whose load failed is loaded again before it is given up (TensorFlow
    Serving's `--max_num_load_retries`, 5 there); a version given up loads again when its files change."""

    load_retry_interval_s: float = Field(60.0, ge=0)
    """Seconds between those load attempts (`--load_retry_interval_micros`)."""

    warmup: bool = True
    """Replay each version's warm-up file before it serves (`--enable_model_warmup`)."""

    warmup_iterations: int = Field(1, ge=1)
    """How many times each request of a version's warm-up file (`assets.extra/tf_serving_warmup_requests`)
    is replayed before the version serves (TensorFlow Serving's `--num_request_iterations_for_warmup`)."""

    signature_method_name_check: bool = False
    """Classify and regress only signatures whose method_name says so (`tensorflow/serving/classify`,
    `.../regress`), as TensorFlow Serving's `--enable_signature_method_name_check` does; off, any signature
    of the right shape serves them (TensorFlow Serving's default)."""

    batching: bool = False
    """Batch the requests of models whose config.yaml has no `batching:` key (a model's own key
    always decides for it)."""

    batching_max_batch_size: int = Field(32, ge=1)
    """Default largest batch, in rows; larger requests are split and reassembled."""

    batching_batch_timeout_micros: int = Field(1000, ge=0)
    """Default longest a request waits for company before its batch runs."""

    batching_allowed_batch_sizes: list[int] = Field(default_factory=list)
    """Default sizes batches are padded up to (the last must equal the max batch size); empty: no padding."""

    batching_max_enqueued_batches: int = Field(64, ge=1)
    """Default queue capacity, in batches of the max size; beyond it requests get 429 with Retry-After."""

    batching_num_batch_threads: int = Field(1, ge=1)
    """Default number of batches of one model version that run at once."""

    batching_parameters_file: Path | None = None
    """TensorFlow Serving's batching parameters file (`--batching_parameters_file`, a BatchingParameters
    in protobuf text format): turns batching on (as `--enable_batching`) with its fields as the
    server-wide defaults, fields it leaves out taking the `batching_*` settings."""

    per_version_batching_parameters: bool = False
    """Where batching is on by default (`batching`, or a batching parameters file), each SavedModel version's
    own `batching_params.pbtxt` (a BatchingParameters text proto, fields it leaves out taking the server's)
    decides its batching, and a version without one is not batched: TensorFlow Serving's
    `--enable_per_model_batching_parameters`. A model whose config.yaml has a `batching:` key keeps it."""

    executor_cache_capacity: int = Field(64, ge=1)
    """Compiled plans kept per model version (one per distinct feed/fetch signature)."""

    check_input_shapes: bool = True
    """Refuse (400, naming the input) a request tensor whose shape the signature and its placeholder rule
    out. Off, as TensorFlow Serving does (`tensorflow_model_server` turns it off), a tensor of any shape is
    fed and the graph decides; plans then assume nothing of fed shapes, which costs some optimizations."""

    max_loop_iterations: int = Field(100_000, ge=1)
    """Most iterations one loop of a graph (a while loop) may run in one request; a runaway loop
    fails with 400 instead of hanging a worker."""

    prun_max_handles: int = Field(64, ge=1)
    """Partial runs that may be open at once on one model version; beyond it a setup gets 429."""

    prun_timeout_s: float = Field(300.0, gt=0)
    """How long a partial run may sit idle (no step) before its handle expires and its state is dropped."""

    archive_max_files: int = Field(10_000, ge=1)
    """Most entries (files and directories) an uploaded version archive may hold; more get 413."""

    archive_max_bytes: int = Field(4 * GiB, gt=0)
    """Most bytes an uploaded version archive may expand to on disk; more get 413. The archive itself
    is an upload body, limited by `max_upload_bytes`."""

    archive_max_ratio: float = Field(100.0, ge=1)
    """Most bytes an uploaded archive may expand to per byte of archive (a zip or gzip bomb gets 413);
    archives expanding to 16 MiB or less are not held to it."""

    device: str = "cpu"
    """The device models run on unless their config.yaml names one (`device:`): `cpu`, `cpu:N`, `gpu`,
    `gpu:N`, or TensorFlow's `/device:GPU:0`. The server refuses to start on a GPU it does not have."""

    cuda_graphs: bool = True
    """Capture a plan's GPU kernel launches as a CUDA graph and replay it where the plan allows
    (GPU devices only); turn off to launch kernel by kernel."""

    compiled_kernels: bool = True
    """Run CPU kernels that have a compiled (numba) loop through it; `false` runs their numpy twins
    (same results, slower). Compiled loops are compiled, or loaded from `kernel_cache_dir`, when the
    first model version loads, never on a request."""

    compile_kernels_in_background: bool = True
    """Compiled loops missing from the kernel cache (a first start) compile on a background thread while
    the model already answers with their numpy twins, instead of its load waiting for the compiler;
    `false` makes the load wait (every answer from the compiled loops)."""

    kernel_cache_dir: Path | None = None
    """Where compiled kernels are cached between starts (numba's cache). Unset: beside the installed
    package where that is writable, else the user's cache directory. The container image sets
    `/tmp/tensorgate-kernels`; the first start compiles a model's loops (seconds), later ones load them."""

    tune_allocator: bool = True
    """Keep freed memory in the C allocator's heap for reuse (glibc) instead of returning large blocks
    to the OS on every free: large intermediate tensors are then not page-faulted in again on every
    request. `false` leaves the allocator as the C library configures it."""

    single_threaded_blas: bool = True
    """Run BLAS (numpy's matrix products) single-threaded, but for one large product at a time from outside
    the engine's kernel pool, so that BLAS threads do not compete with the pool and with other requests for
    the cores; `false` leaves BLAS's own threading (OPENBLAS_NUM_THREADS and the like) in charge."""

    monitoring_config_file: Path | None = None
    """TensorFlow Serving's monitoring config file (`--monitoring_config_file`, a MonitoringConfig in
    protobuf text format): `prometheus_config { enable: true, path: "/p" }` serves metrics at `/p` too
    (default: `/monitoring/prometheus/metrics`); `enable: false` leaves only `/metrics`."""

    log_level: str = "info"
    """uvicorn's log level."""

    access_log: bool = False
    """Log every HTTP request, as a JSON line on stdout (off, as in TensorFlow Serving: a line per
    request costs throughput, and Prometheus counts requests already). Errors are always logged."""

    @model_validator(mode="after")
    def _tls_pairs(self) -> Settings:
        for prefix in ("grpc_tls", "tls"):
            cert, key, ca = (getattr(self, f"{prefix}_{part}") for part in ("cert", "key", "ca"))
            if (cert is None) != (key is None):
                raise ValueError(f"{prefix}_cert and {prefix}_key go together: set both (TENSORGATE_{prefix.upper()}_CERT/_KEY) or neither")
            if ca is not None and cert is None:
                raise ValueError(f"{prefix}_ca checks client certificates over TLS: it needs {prefix}_cert and {prefix}_key")
            for part, path in (("cert", cert), ("key", key), ("ca", ca)):
                if path is not None and not path.is_file():
                    raise ValueError(f"{prefix}_{part}: no such file '{path}'")
        return self

    @model_validator(mode="after")
    def _grpc_credentials(self) -> Settings:
        given = [name for name, on in (("grpc_tls_cert", self.grpc_tls_cert is not None),
                                       ("grpc_ssl_config_file", self.grpc_ssl_config_file is not None),
                                       ("grpc_alts", self.grpc_alts)) if on]
        if len(given) > 1:
            raise ValueError(f"{' and '.join(given)} each set gRPC's credentials: choose one")
        if self.model_base_path is not None and self.model_config_file is not None:
            raise ValueError("model_base_path serves one model, model_config_file a list of them: set one")
        return self

    @model_validator(mode="after")
    def _payload_log_sink(self) -> Settings:
        if self.payload_log_url is not None and self.payload_log_file is not None:
            raise ValueError("payload_log_url and payload_log_file are two sinks for the payload log: set one")
        if self.payload_log_url is not None and not self.payload_log_url.startswith(("http://", "https://")):
            raise ValueError(f"payload_log_url must be an http:// or https:// URL, not '{self.payload_log_url}'")
        return self

    def cors_origins(self) -> list[str]:
        """The origins CORS allows ([]: CORS off)."""
        return list(self.cors_allow_origins) or (["*"] if self.cors else [])

    def tracing_on(self) -> bool:
        """Whether requests are traced: `tracing`, or `tracing_endpoint`, or OpenTelemetry's variables."""
        from service.observability.tracing import tracing_wanted

        return tracing_wanted(True if self.tracing_endpoint and self.tracing is None else self.tracing)

    @field_validator("device")
    @classmethod
    def _device_name(cls, value: str) -> str:
        parse_device(value)  # DeviceError (a ValueError) names the nonsense
        return value.strip()

    def batching_options(self) -> BatchingOptions:
        """The server-wide batching defaults (a ValueError names an inconsistent combination)."""
        return BatchingOptions(
            max_batch_size=self.batching_max_batch_size,
            batch_timeout_micros=self.batching_batch_timeout_micros,
            allowed_batch_sizes=tuple(self.batching_allowed_batch_sizes),
            max_enqueued_batches=self.batching_max_enqueued_batches,
            num_batch_threads=self.batching_num_batch_threads,
        )

    def serves_repository(self) -> bool:
        """Whether `model_repository` is served: always, unless a model config file or a model base path
        is given and the repository was not (TensorFlow Serving serves just those models)."""
        alone = self.model_config_file is not None or self.model_base_path is not None
        return not alone or "model_repository" in self.model_fields_set

    def archive_limits(self) -> ArchiveLimits:
        """What an uploaded version archive may expand to."""
        return ArchiveLimits(max_files=self.archive_max_files, max_bytes=self.archive_max_bytes, max_ratio=self.archive_max_ratio)

    def session_options(self) -> SessionOptions:
        """The options every model version's Session is built with."""
        return SessionOptions(
            cache_capacity=self.executor_cache_capacity,
            prun_max_handles=self.prun_max_handles,
            prun_timeout_s=self.prun_timeout_s,
            plan=PlanOptions(max_loop_iterations=self.max_loop_iterations, compiled_kernels=self.compiled_kernels,
                             compile_in_background=self.compile_kernels_in_background,
                             max_request_memory_bytes=self.max_request_memory_bytes,
                             check_feed_shapes=self.check_input_shapes),
            cuda_graphs=self.cuda_graphs,
            tune_allocator=self.tune_allocator,
            single_threaded_blas=self.single_threaded_blas,
        )

    def management_open_without_token(self) -> bool:
        """Management without a token is safe only when nobody but this machine can connect."""
        return is_loopback(self.host)


def check_device_available(spec: str) -> None:
    """DeviceError unless this process has device `spec`: a GPU needs cupy and a CUDA device of that
    index. Any CPU index passes here (logical CPUs are the engine's to create)."""
    _, index = parse_device(spec)
    resolve_device(spec, logical_cpus=index + 1)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
