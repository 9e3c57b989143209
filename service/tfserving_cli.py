"""`tensorflow_model_server`: TensorFlow Serving 2.21's command line, flag for flag, on tensorgate.

A deployment written for TensorFlow Serving (a Kubernetes manifest, a Dockerfile, a script) runs with
only the binary's or the image's name changed:

    tensorflow_model_server --port=8500 --rest_api_port=8501 \\
        --model_name=my_model --model_base_path=/models/my_model

Flags are parsed as TensorFlow's `Flags::Parse` does (`--name=value`; a bool also as `--name`; the last
of a repeated flag wins) with TensorFlow Serving's defaults (`tensorflow_serving/model_servers/main.cc`,
`server.h`), and each is mapped onto a `service.settings.Settings` field. Settings no flag covers still
come from `TENSORGATE_*` variables (TENSORGATE_HOST binds an address other than TensorFlow Serving's
0.0.0.0, TENSORGATE_ADMIN_TOKEN, ...), and so does a tuning setting whose flag is not given
(TENSORGATE_POLL_INTERVAL_S without --file_system_poll_wait_seconds); ports and models come from flags. As TensorFlow Serving, the server loads every model before it
listens, and exits with "Failed to start server" when one cannot load.

A flag that only tunes TensorFlow's own runtime (XLA, GPU memory fraction, TFLite pools, ...) is accepted
with one warning naming it. Where tensorgate is stricter than TensorFlow Serving: an unknown argument
stops the start (TensorFlow Serving prints "unknown argument" and carries on, so a typo goes unnoticed).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["FLAGS", "Flag", "FlagError", "main", "parse_flags", "settings_from_flags"]

log = logging.getLogger("tensorgate.tfserving")

# The TensorFlow Serving release whose command line this is, and the TensorFlow its graphs come from.
TF_SERVING_VERSION = "2.21.0"
_CPUS = os.cpu_count() or 1


@dataclass(frozen=True)
class Flag:
    """One of TensorFlow Serving's flags: its type and default, and what tensorgate does with it.

    `effect` is "setting" (mapped onto Settings), "ignored" (accepted with a warning saying why: it tunes
    TensorFlow's runtime, which tensorgate does not have), or "refused" (stops the start, saying why)."""

    name: str
    kind: type
    default: Any
    help: str
    effect: str = "setting"
    why: str = ""


_TF_RUNTIME = "it tunes TensorFlow's own runtime, which tensorgate does not use"
_TFLITE = "tensorgate runs TensorFlow graphs, not TensorFlow Lite models"

FLAGS: tuple[Flag, ...] = (
    Flag("port", int, 8500, "TCP port to listen on for gRPC/HTTP API. Disabled if port set to zero."),
    Flag("grpc_socket_path", str, "", "If non-empty, listen to a UNIX socket for gRPC API on the given path. Can be "
         "either relative or absolute path."),
    Flag("rest_api_port", int, 0, "Port to listen on for HTTP/REST API. If set to zero HTTP/REST API will not be "
         "exported. This port must be different than the one specified in --port."),
    Flag("rest_api_num_threads", int, 4 * _CPUS, "Number of threads for HTTP/REST API processing.", "ignored",
         "tensorgate's HTTP server is asynchronous; model work runs on --tensorflow_inter_op_parallelism threads"),
    Flag("rest_api_timeout_in_ms", int, 30000, "Timeout for HTTP/REST API calls."),
    Flag("rest_api_enable_cors_support", bool, False, "Enable CORS headers in response"),
    Flag("enable_batching", bool, False, "enable batching"),
    Flag("allow_version_labels_for_unavailable_models", bool, False, "If true, allows assigning unused version labels "
         "to models that are not available yet."),
    Flag("batching_parameters_file", str, "", "If non-empty, read an ascii BatchingParameters protobuf from the "
         "supplied file name and use the contained values instead of the defaults."),
    Flag("enable_per_model_batching_parameters", bool, False, "Enables model specific batching params like batch "
         "sizes, timeouts, batching feature flags to be read from `batching_params.pbtxt` file present in SavedModel "
         "dir of the model. This option is only applicable when --enable_batching flag is set."),
    Flag("model_config_file", str, "", "If non-empty, read an ascii ModelServerConfig protobuf from the supplied "
         "file name, and serve the models in that file. (If used, --model_name, --model_base_path are ignored.)"),
    Flag("model_config_file_poll_wait_seconds", int, 0, "Interval in seconds between each poll of the filesystem for "
         "model_config_file. If unset or set to zero, poll will be done exactly once and not periodically."),
    Flag("model_name", str, "default", "name of model (ignored if --model_config_file flag is set)"),
    Flag("model_base_path", str, "", "path to export (ignored if --model_config_file flag is set, otherwise required)"),
    Flag("num_load_threads", int, 0, "The number of threads in the thread-pool used to load servables."),
    Flag("num_unload_threads", int, 0, "The number of threads in the thread-pool used to unload servables.", "ignored",
         "tensorgate unloads a version as soon as its last request finishes"),
    Flag("max_num_load_retries", int, 5, "maximum number of times it retries loading a model after the first "
         "failure, before giving up. If set to 0, a load is attempted only once."),
    Flag("load_retry_interval_micros", int, 60_000_000, "The interval, in microseconds, between each servable load "
         "retry. If set negative, it doesn't wait."),
    Flag("file_system_poll_wait_seconds", int, 1, "Interval in seconds between each poll of the filesystem for new "
         "model version. If set to zero poll will be exactly done once and not periodically."),
    Flag("flush_filesystem_caches", bool, True, "Flush filesystem caches after the initial load.", "ignored", _TF_RUNTIME),
    Flag("tensorflow_session_parallelism", int, 0, "Number of threads to use for running a Tensorflow session."),
    Flag("tensorflow_session_config_file", str, "", "If non-empty, read an ascii TensorFlow Session ConfigProto "
         "protobuf from the supplied file name.", "ignored", _TF_RUNTIME),
    Flag("tensorflow_intra_op_parallelism", int, 0, "Number of threads to use to parallelize the execution of an "
         "individual op."),
    Flag("tensorflow_inter_op_parallelism", int, 0, "Controls the number of operators that can be executed "
         "simultaneously."),
    Flag("use_alts_credentials", bool, False, "Use Google ALTS credentials"),
    Flag("ssl_config_file", str, "", "If non-empty, read an ascii SSLConfig protobuf from the supplied file name and "
         "set up a secure gRPC channel"),
    Flag("platform_config_file", str, "", "If non-empty, read an ascii PlatformConfigMap protobuf from the supplied "
         "file name.", "refused", "use --enable_batching, --batching_parameters_file and --saved_model_tags, which "
         "cover what a PlatformConfigMap sets for TensorFlow models"),
    Flag("per_process_gpu_memory_fraction", float, 0.0, "Fraction that each process occupies of the GPU memory "
         "space.", "ignored", _TF_RUNTIME),
    Flag("saved_model_tags", str, "serve", "Comma-separated set of tags corresponding to the meta graph def to load "
         "from SavedModel."),
    Flag("grpc_channel_arguments", str, "", "A comma separated list of arguments to be passed to the grpc server. "
         "(e.g. grpc.max_connection_age_ms=2000)"),
    Flag("grpc_max_threads", int, 4 * _CPUS, "Max grpc server threads to handle grpc messages.", "ignored",
         "tensorgate's gRPC server is asynchronous; model work runs on --tensorflow_inter_op_parallelism threads"),
    Flag("enable_model_warmup", bool, True, "Enables model warmup, which triggers lazy initializations (such as TF "
         "optimizations) at load time, to reduce first request latency."),
    Flag("num_request_iterations_for_warmup", int, 0, "Number of times a request is iterated during warmup replay. "
         "This value is used only if > 0."),
    Flag("version", bool, False, "Display version"),
    Flag("monitoring_config_file", str, "", "If non-empty, read an ascii MonitoringConfig protobuf from the supplied "
         "file name"),
    Flag("remove_unused_fields_from_bundle_metagraph", bool, True, "Removes unused fields from MetaGraphDef proto "
         "message to save memory.", "ignored", "tensorgate keeps no MetaGraphDef once a model has loaded"),
    Flag("prefer_tflite_model", bool, False, "Prefer TensorFlow Lite model from `model.tflite` file in SavedModel "
         "directory.", "ignored", _TFLITE + "; the SavedModel is served"),
    Flag("num_tflite_pools", int, _CPUS, "Number of TFLite interpreters in an interpreter pool.", "ignored", _TFLITE),
    Flag("num_tflite_interpreters_per_pool", int, 1, "Number of TFLite interpreters per pool.", "ignored", _TFLITE),
    Flag("enable_signature_method_name_check", bool, False, "Enable method_name check for SignatureDef. Disable this "
         "if serving native TF2 regression/classification models."),
    Flag("xla_cpu_compilation_enabled", bool, False, "Enable XLA:CPU JIT (default is disabled).", "ignored", _TF_RUNTIME),
    Flag("xla_gpu_compilation_enabled", bool, False, "Enable both XLA:CPU JIT and XLA:GPU JIT.", "ignored", _TF_RUNTIME),
    Flag("enable_profiler", bool, True, "Enable profiler service.", "ignored",
         "tensorgate has no TensorFlow profiler service (its metrics are on the REST port, for Prometheus)"),
    Flag("thread_pool_factory_config_file", str, "", "If non-empty, read an ascii ThreadPoolConfig protobuf from the "
         "supplied file name.", "ignored", _TF_RUNTIME),
    Flag("mixed_precision", str, "", "specify mixed_precision mode", "ignored", _TF_RUNTIME),
    Flag("skip_initialize_tpu", bool, False, "Whether to skip auto initializing TPU.", "ignored",
         "tensorgate runs on CPUs and NVIDIA GPUs"),
    Flag("enable_grpc_healthcheck_service", bool, False, "Enable the standard gRPC healthcheck service.", "ignored",
         "tensorgate always serves grpc.health.v1.Health, ModelService and PredictionService included"),
    Flag("enable_serialization_as_tensor_content", bool, False, "Enable serialization of predict response as tensor "
         "content."),
)
_BY_NAME = {flag.name: flag for flag in FLAGS}


class FlagError(Exception):
    """A command line TensorFlow Serving's parser would refuse (a bad value), or one tensorgate refuses."""


def usage(program: str = "tensorflow_model_server") -> str:
    """TensorFlow's `Flags::Usage`: the flags, their types and defaults."""
    lines = [f"usage: {program}", "Flags:"]
    for flag in FLAGS:
        kind = {int: "int32", float: "float", bool: "bool", str: "string"}[flag.kind]
        default = str(flag.default).lower() if flag.kind is bool else f'"{flag.default}"' if flag.kind is str else flag.default
        lines.append(f"\t--{flag.name}={default}\t{kind}\t{flag.help}")
    return "\n".join(lines) + "\n"


def _value(flag: Flag, text: str | None) -> Any:
    if flag.kind is bool:
        if text is None:
            return True
        if text.lower() in ("true", "1"):
            return True
        if text.lower() in ("false", "0"):
            return False
    elif text is not None:
        try:
            return flag.kind(text)
        except ValueError:
            pass
    # TensorFlow's command_line_flags.cc wording.
    raise FlagError(f"Couldn't interpret value {'' if text is None else '=' + text} for flag {flag.name}.")


def parse_flags(argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """The flags given (name -> value, the last of a repeated flag winning) and the arguments that are
    not flags of TensorFlow Serving. FlagError for a value a flag cannot take."""
    given: dict[str, Any] = {}
    unknown: list[str] = []
    for arg in argv:
        if not arg.startswith("--"):
            unknown.append(arg)
            continue
        name, sep, text = arg[2:].partition("=")
        flag = _BY_NAME.get(name)
        if flag is None:
            unknown.append(arg)
            continue
        given[name] = _value(flag, text if sep else None)
    return given, unknown


def _flag(given: dict[str, Any], name: str) -> Any:
    return given.get(name, _BY_NAME[name].default)


def _threads(given: dict[str, Any]) -> dict[str, int]:
    """TensorFlow's parallelism flags on tensorgate's threads: intra-op is the kernel pool (one large op
    split over threads), inter-op the inference threads (requests and ops running at once)."""
    intra, inter, both = (_flag(given, f"tensorflow_{n}") for n in ("intra_op_parallelism", "inter_op_parallelism",
                                                                     "session_parallelism"))
    if intra > 0 and inter > 0 and both > 0:
        raise FlagError("Either configure server_options.tensorflow_session_parallelism or "
                        "(server_options.tensorflow_intra_op_parallelism, server_options.tensorflow_inter_op_parallelism) "
                        "separately. You cannot configure all.")
    if intra <= 0 and inter <= 0:
        intra = inter = both
    threads = {}
    if intra > 0:
        threads["kernel_threads"] = intra
    if inter > 0:
        threads["inference_threads"] = inter
    return threads


def settings_from_flags(given: dict[str, Any], environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The Settings fields TensorFlow Serving's flags `given` mean (unset flags take TensorFlow Serving's
    defaults); FlagError with TensorFlow Serving's message for a combination it refuses."""
    environ = os.environ if environ is None else environ
    grpc_port, socket_path = _flag(given, "port"), _flag(given, "grpc_socket_path")
    if grpc_port == 0 and not socket_path:
        raise FlagError("At least one of server_options.grpc_port or server_options.grpc_socket_path must be set.")
    if _flag(given, "use_alts_credentials") and _flag(given, "ssl_config_file"):
        raise FlagError("Either use_alts_credentials must be false or ssl_config_file must be empty.")
    config_file, base_path = _flag(given, "model_config_file"), _flag(given, "model_base_path")
    if not config_file and not base_path:
        raise FlagError("Both server_options.model_base_path and server_options.model_config_file are empty!")
    if _flag(given, "batching_parameters_file") and not _flag(given, "enable_batching"):
        raise FlagError("server_options.batching_parameters_file is set without setting "
                        "server_options.enable_batching to true.")
    for name in given:
        if _BY_NAME[name].effect == "refused":
            raise FlagError(f"--{name} is not supported: {_BY_NAME[name].why}")
    if any(port < 0 or port > 65535 for port in (grpc_port, _flag(given, "rest_api_port"))):
        raise FlagError("--port and --rest_api_port must be between 0 and 65535")

    rest_port = _flag(given, "rest_api_port")
    if rest_port == grpc_port:  # TensorFlow Serving serves gRPC alone then, and says so
        if rest_port:
            log.error("server_options.http_port cannot be same as grpc_port. Please use a different port for "
                      "HTTP/REST API. Skipped exporting HTTP/REST API.")
        rest_port = 0
    retry_micros = _flag(given, "load_retry_interval_micros")
    fields: dict[str, Any] = {
        "grpc_port": grpc_port,
        "http": rest_port != 0,
        "port": rest_port,
        "request_timeout_s": max(_flag(given, "rest_api_timeout_in_ms"), 1) / 1000,
        "cors": _flag(given, "rest_api_enable_cors_support"),
        "batching": _flag(given, "enable_batching"),
        "per_version_batching_parameters": _flag(given, "enable_per_model_batching_parameters"),
        "load_threads": max(_flag(given, "num_load_threads"), 1),
        "load_retries": max(_flag(given, "max_num_load_retries"), 0),
        "load_retry_interval_s": max(retry_micros, 0) / 1e6,
        # Negative: TensorFlow Serving's "testing only" no polling at all; tensorgate scans once.
        "poll_interval_s": max(_flag(given, "file_system_poll_wait_seconds"), 0),
        "model_config_file_poll_wait_seconds": max(_flag(given, "model_config_file_poll_wait_seconds"), 0),
        "saved_model_tags": [t for t in _flag(given, "saved_model_tags").split(",") if t] or ["serve"],
        "grpc_channel_arguments": _flag(given, "grpc_channel_arguments"),
        "grpc_alts": _flag(given, "use_alts_credentials"),
        "warmup": _flag(given, "enable_model_warmup"),
        "signature_method_name_check": _flag(given, "enable_signature_method_name_check"),
        "predict_tensor_content": _flag(given, "enable_serialization_as_tensor_content"),
        # TensorFlow's session feeds a value of any shape ([1] into a [?,1] input): so does this server.
        "check_input_shapes": False,
        "allow_version_labels_for_unavailable_models": _flag(given, "allow_version_labels_for_unavailable_models"),
        **_threads(given),
    }
    if _flag(given, "num_request_iterations_for_warmup") > 0:
        fields["warmup_iterations"] = _flag(given, "num_request_iterations_for_warmup")
    for flag, field in (("grpc_socket_path", "grpc_socket_path"), ("ssl_config_file", "grpc_ssl_config_file"),
                        ("batching_parameters_file", "batching_parameters_file"),
                        ("monitoring_config_file", "monitoring_config_file")):
        if _flag(given, flag):
            fields[field] = Path(_flag(given, flag))
    if config_file:  # as TensorFlow Serving: the config file wins, --model_name/--model_base_path are ignored
        fields["model_config_file"] = Path(config_file)
    else:
        if "://" in base_path:  # gs://, s3://, hdfs://: TensorFlow's file systems, which tensorgate has not
            raise FlagError(f"--model_base_path={base_path} is a URL; tensorgate reads local directories only "
                            "(mount the bucket, or sync it to a volume)")
        fields["model_base_path"] = Path(base_path)
        fields["model_name"] = _flag(given, "model_name")
    if "TENSORGATE_HOST" not in environ:
        fields["host"] = "0.0.0.0"  # TensorFlow Serving listens on every interface
    # A tuning setting whose flag was not given keeps its TENSORGATE_* variable, where one is set, over
    # TensorFlow Serving's default; the listeners and the models come from the flags alone.
    for field, flags in _ENV_FALLBACK.items():
        if field in fields and not any(f in given for f in flags) and f"TENSORGATE_{field.upper()}" in environ:
            del fields[field]
    return fields


# Settings fields a TENSORGATE_* variable may set when their flags are not given.
_ENV_FALLBACK = {
    "request_timeout_s": ("rest_api_timeout_in_ms",),
    "cors": ("rest_api_enable_cors_support",),
    "batching": ("enable_batching",),
    "per_version_batching_parameters": ("enable_per_model_batching_parameters",),
    "load_threads": ("num_load_threads",),
    "load_retries": ("max_num_load_retries",),
    "load_retry_interval_s": ("load_retry_interval_micros",),
    "poll_interval_s": ("file_system_poll_wait_seconds",),
    "model_config_file_poll_wait_seconds": ("model_config_file_poll_wait_seconds",),
    "saved_model_tags": ("saved_model_tags",),
    "grpc_channel_arguments": ("grpc_channel_arguments",),
    "grpc_alts": ("use_alts_credentials",),
    "warmup": ("enable_model_warmup",),
    "signature_method_name_check": ("enable_signature_method_name_check",),
    "predict_tensor_content": ("enable_serialization_as_tensor_content",),
    "allow_version_labels_for_unavailable_models": ("allow_version_labels_for_unavailable_models",),
}


def _warn_ignored(given: dict[str, Any]) -> None:
    for name in given:
        flag = _BY_NAME[name]
        if flag.effect == "ignored":
            log.warning("--%s is accepted and has no effect: %s", name, flag.why)


def _announce(settings) -> Callable[[Any], None]:
    """TensorFlow Serving's start-up lines, which scripts and people wait for."""

    def listening(server) -> None:
        if settings.grpc_port:
            log.info("Running gRPC ModelServer at 0.0.0.0:%d ...", settings.grpc_port)
        if settings.grpc_socket_path is not None:
            log.info("Running gRPC ModelServer at UNIX socket %s ...", settings.grpc_socket_path)
        if settings.http:
            log.info("Exporting HTTP/REST API at:localhost:%d ...", settings.port)

    return listening


def _fail(message: str) -> int:
    print(f"Failed to start server. Error: {message}", file=sys.stderr)
    return 255  # TensorFlow Serving's main returns -1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname).1s %(name)s] %(message)s")
    if "--help" in argv or "-h" in argv:
        print(usage(), end="")
        return 0
    try:
        given, unknown = parse_flags(argv)
    except FlagError as e:
        print(f"{e}\n{usage()}", end="", file=sys.stderr)
        return 255
    if given.get("version"):
        import service

        print(f"TensorFlow ModelServer: {TF_SERVING_VERSION} (tensorgate {service.__version__})\n"
              "TensorFlow Library: none (tensorgate runs TensorFlow graphs without it)")
        return 0
    if unknown:
        print(f"unknown argument: {unknown[0]}\n{usage()}", end="", file=sys.stderr)
        return 255
    _warn_ignored(given)

    from pydantic import ValidationError

    from engine.devices import DeviceError
    from service.repository.config import ConfigError
    from service.server import ModelsUnavailable, serve
    from service.settings import Settings

    try:
        fields = settings_from_flags(given)
        if fields.get("model_base_path") is not None:
            log.info("Building single TensorFlow model file config:  model_name: %s model_base_path: %s",
                     fields["model_name"], fields["model_base_path"])
        settings = Settings(**fields)
        return serve(settings, wait_for_models=True, on_listening=_announce(settings))
    except FlagError as e:
        return _fail(f"INVALID_ARGUMENT: {e}")
    except ValidationError as e:
        return _fail(f"INVALID_ARGUMENT: {e}")
    except (ConfigError, DeviceError) as e:
        return _fail(f"INVALID_ARGUMENT: {e}")
    except ModelsUnavailable as e:
        return _fail(f"UNKNOWN: {e}")
    except OSError as e:  # a port or socket path that cannot be bound
        return _fail(f"UNAVAILABLE: {e}")


if __name__ == "__main__":
    sys.exit(main())
