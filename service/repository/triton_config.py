"""Triton's model repositories, as its TensorFlow backend read them: `<model>/config.pbtxt` (a ModelConfig in
protobuf text format) beside versions holding `model.graphdef` (a GraphDef) or `model.savedmodel/` (a
SavedModel). A model directory with a config.pbtxt and no config.yaml is one; its config becomes the
ModelConfig a config.yaml would have given:

| config.pbtxt | here |
|---|---|
| `platform: "tensorflow_graphdef"`, `"tensorflow_savedmodel"`, or `backend: "tensorflow"` | required; any other is refused, naming it |
| `input`, `output` (`name`, graph tensor names with or without `:0`) | a GraphDef's `serving_default` signature |
| `input`, `output` of a SavedModel | the SignatureDef's aliases (checked when the version loads) |
| `version_policy` | `version_policy` |
| `max_batch_size` with `dynamic_batching { max_queue_delay_microseconds }` | `batching` (max batch size, timeout) |
| `instance_group { kind: KIND_GPU gpus: [n] }` | `device: gpu:n` (KIND_CPU: `cpu`) |
| `output { label_filename }` | the labels of the classification extension |
| `reshape { shape }` of an input or output | the array reshaped between the client's dims and the graph's shape |
| `parameters { key: "TF_SIGNATURE_DEF" }` | the signature served, where it is `serving_default` |
| `parameters { key: "TF_GRAPH_TAG" }` | the SavedModel's MetaGraph tag |
| `default_model_filename` | the GraphDef file or SavedModel directory each version holds |
| `instance_group { count }` with dynamic batching | batches that run at once |

`sequence_batching`, `ensemble_scheduling`, `TF_INIT_OPS_FILE` and `TF_SIGNATURE_DEF` naming another signature are
refused with a message naming the field; `model_warmup`, `optimization` and the TF backend's thread and
memory parameters have no effect here.

    >>> config = read_triton_config(Path("models/simple"), "simple/config.pbtxt")
"""

from __future__ import annotations

import functools
from pathlib import Path

from google.protobuf import json_format

from service.protocols.proto import model_config_pb2 as mc
from service.repository.config import ConfigError, ModelConfig, SignatureConfig, VersionPolicy, parse_text_proto

__all__ = ["TRITON_CONFIG_FILE", "GRAPHDEF_FILE", "SAVEDMODEL_DIR", "read_triton_config", "triton_config_document",
           "triton_model_file"]

TRITON_CONFIG_FILE = "config.pbtxt"
GRAPHDEF_FILE = "model.graphdef"
SAVEDMODEL_DIR = "model.savedmodel"
_PLATFORMS = ("tensorflow_graphdef", "tensorflow_savedmodel")


def _tensor(name: str) -> str:
    return name if ":" in name else f"{name}:0"


def _version_policy(config: mc.ModelConfig) -> VersionPolicy:
    if not config.HasField("version_policy"):
        return VersionPolicy()
    choice = config.version_policy.WhichOneof("policy_choice")
    if choice == "all":
        return VersionPolicy(kind="all")
    if choice == "specific":
        return VersionPolicy(kind="specific", versions=tuple(config.version_policy.specific.versions))
    return VersionPolicy(kind="latest", latest=max(config.version_policy.latest.num_versions, 1))


def _device(config: mc.ModelConfig) -> str | None:
    for group in config.instance_group:
        if group.kind == mc.ModelInstanceGroup.KIND_GPU:
            return f"gpu:{group.gpus[0]}" if group.gpus else "gpu"
        if group.kind == mc.ModelInstanceGroup.KIND_CPU:
            return "cpu"
    return None


def triton_model_file(model_dir: Path) -> str | None:
    """A Triton model's `default_model_filename` (the file or directory each version holds in place of
    model.graphdef / model.savedmodel), or None. A config that cannot be read gives None here: reading
    the config reports it. Every poll asks, so the file is parsed again only when it changed."""
    path = model_dir / TRITON_CONFIG_FILE
    try:
        st = path.stat()
    except OSError:
        return None
    return _default_model_filename(str(path), (st.st_size, st.st_mtime_ns, st.st_ino))


@functools.lru_cache(maxsize=1024)
def _default_model_filename(path: str, stat: tuple) -> str | None:
    try:
        config = parse_text_proto(Path(path).read_bytes(), mc.ModelConfig(), path)
    except (OSError, ConfigError):
        return None
    name = config.default_model_filename
    return name if name and "/" not in name and name not in (".", "..") else None


def read_triton_config(model_dir: Path, source: str) -> ModelConfig:
    """The ModelConfig `<model_dir>/config.pbtxt` means; ConfigError naming `source` and the field."""
    try:
        text = (model_dir / TRITON_CONFIG_FILE).read_bytes()
    except OSError as e:
        raise ConfigError(f"{source}: cannot read it: {e.strerror or e}") from None
    config = parse_text_proto(text, mc.ModelConfig(), source)
    if config.name and config.name != model_dir.name:
        raise ConfigError(f"{source}: name '{config.name}' is not the model's directory name '{model_dir.name}'")
    platform = config.platform or ("tensorflow" if config.backend == "tensorflow" else "")
    if platform not in (*_PLATFORMS, "tensorflow"):
        raise ConfigError(f"{source}: platform '{config.platform or config.backend}' is not served here: tensorgate "
                          f"serves TensorFlow models ({', '.join(_PLATFORMS)}, or backend: \"tensorflow\")")
    for field in ("sequence_batching", "ensemble_scheduling"):
        if config.HasField(field):
            raise ConfigError(f"{source}: {field} is not supported (tensorgate runs one TensorFlow graph per request or batch)")
    batch = [-1] if config.max_batch_size > 0 else []
    reshape = {}
    for tensor in config.input:  # the client's dims -> the graph's shape
        if tensor.HasField("reshape"):
            reshape[tensor.name] = batch + list(tensor.reshape.shape)
    for tensor in config.output:  # the graph's shape -> the client's dims
        if tensor.HasField("reshape"):
            reshape[tensor.name] = batch + list(tensor.dims)
    for name, shape in reshape.items():
        if shape.count(-1) > 1:
            raise ConfigError(f"{source}: '{name}': reshape needs every size but one known, got {shape}")
    if config.default_model_filename and ("/" in config.default_model_filename
                                          or config.default_model_filename in (".", "..")):
        raise ConfigError(f"{source}: default_model_filename '{config.default_model_filename}' must name a file or "
                          "directory in each version directory")
    if "TF_INIT_OPS_FILE" in config.parameters:
        raise ConfigError(f"{source}: parameters TF_INIT_OPS_FILE is not supported: export the init ops as the "
                          "SavedModel's main op (tf.compat.v1.saved_model.Builder's main_op), which runs at load")
    signature = config.parameters["TF_SIGNATURE_DEF"].string_value if "TF_SIGNATURE_DEF" in config.parameters else ""
    if signature not in ("", "serving_default"):
        raise ConfigError(f"{source}: parameters TF_SIGNATURE_DEF '{signature}': only serving_default is served; "
                          "export the signature as serving_default")
    batching = None
    if config.max_batch_size > 0 and config.HasField("dynamic_batching"):
        batching = {"max_batch_size": config.max_batch_size,
                    "batch_timeout_micros": config.dynamic_batching.max_queue_delay_microseconds}
        instances = sum(group.count or 1 for group in config.instance_group)
        if instances > 1:  # batches of the model that run at once, as Triton's model instances
            batching["num_batch_threads"] = instances
    tag = config.parameters["TF_GRAPH_TAG"].string_value if "TF_GRAPH_TAG" in config.parameters else ""
    signatures = {}
    if platform != "tensorflow_savedmodel" and config.input and config.output:
        # A GraphDef's tensors by name; a SavedModel's signature brings its own aliases.
        signatures["serving_default"] = SignatureConfig(inputs={t.name: _tensor(t.name) for t in config.input},
                                                        outputs={t.name: _tensor(t.name) for t in config.output})
    labels = {}
    for tensor in config.output:
        if tensor.label_filename:
            try:  # a line per class index, in the model directory
                labels[tensor.name] = (model_dir / tensor.label_filename).read_text().splitlines()
            except (OSError, UnicodeDecodeError) as e:
                raise ConfigError(f"{source}: output '{tensor.name}': label_filename '{tensor.label_filename}' cannot "
                                  f"be read: {getattr(e, 'strerror', None) or e}") from None
    try:
        return ModelConfig(version_policy=_version_policy(config), signatures=signatures, batching=batching,
                           device=_device(config), output_labels=labels, reshape=reshape,
                           saved_model_tags=[tag] if tag else None)
    except ValueError as e:
        raise ConfigError(f"{source}: {e}") from None


def triton_config_document(model_dir: Path | None) -> dict | None:
    """A Triton repository model's config.pbtxt as Triton's config endpoint writes it (JSON, field names as in
    the schema); None for a model of our own layout. The config was checked when the model loaded."""
    if model_dir is None or (model_dir / "config.yaml").is_file() or not (model_dir / TRITON_CONFIG_FILE).is_file():
        return None
    try:
        config = parse_text_proto((model_dir / TRITON_CONFIG_FILE).read_bytes(), mc.ModelConfig(), str(model_dir))
    except (OSError, ConfigError):
        return None  # changed since it loaded: the next poll reports it
    return json_format.MessageToDict(config, preserving_proto_field_name=True)
