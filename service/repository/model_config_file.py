"""TensorFlow Serving's model config file (`--model-config-file`, a ModelServerConfig in protobuf text
format): the models it lists, each with a base path of its own holding numbered version directories,
its version policy and its labels. It is read at start and, when polled, again whenever it changes.

    model_config_list {
      config {
        name: "half_plus_two"
        base_path: "/models/half_plus_two"        # relative: to the config file's directory
        model_platform: "tensorflow"
        model_version_policy { latest { num_versions: 2 } }   # or all {}, or specific { versions: 1 }
        version_labels { key: "stable" value: 1 }
      }
    }

A ModelConfig's `model_version_policy` and `version_labels` are what `version_policy` and `labels`
are in a repository model's config.yaml. A `config.yaml` in the base path may still add signatures,
batching and a device, but not a version policy or labels (the config file decides those).
`logging_config` is parsed and ignored (tensorgate logs no requests); `custom_model_config` is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from service.errors import BadRequest
from service.protocols.proto.model_server_config_pb2 import ModelConfig as ModelConfigProto
from service.protocols.proto.model_server_config_pb2 import ModelServerConfig, ModelType
from service.repository import check_model_name
from service.repository.config import ConfigError, ModelConfig, VersionPolicy, parse_text_proto

__all__ = ["ConfiguredModel", "ModelConfigFile", "parse_model_server_config", "models_of_server_config"]

PLATFORM = "tensorflow"
_LABEL = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class ConfiguredModel:
    """One model of the model config file: where its versions are, which to serve, and its labels."""

    name: str
    base_path: Path
    version_policy: VersionPolicy
    labels: tuple[tuple[str, int], ...] = ()

    def apply_to(self, config: ModelConfig, source: str) -> ModelConfig:
        """The model's config: its base path's config.yaml (`config`) with this policy and these
        labels. A config.yaml that sets either is refused: the model config file decides them."""
        given = sorted(config.model_fields_set & {"version_policy", "labels"})
        if given:
            raise ConfigError(f"{source}: {' and '.join(given)} of model '{self.name}' come from the model config file "
                              f"(model_version_policy, version_labels); remove {'them' if len(given) > 1 else 'it'} here")
        return config.model_copy(update={"version_policy": self.version_policy, "labels": dict(self.labels)})


def _platform(config: ModelConfigProto, model: str, source: str) -> str:
    # TensorFlow Serving's GetPlatform: the deprecated model_type, or model_platform, not both.
    if config.model_type != ModelType.MODEL_TYPE_UNSPECIFIED:
        if config.model_platform:
            raise ConfigError(f"{source}: model '{model}' sets both model_type (deprecated) and model_platform")
        if config.model_type != ModelType.TENSORFLOW:
            raise ConfigError(f"{source}: model '{model}': model_type {ModelType.Name(config.model_type)} is not supported")
        return PLATFORM
    if not config.model_platform:
        raise ConfigError(f"{source}: model '{model}' needs model_platform: \"{PLATFORM}\"")
    return config.model_platform


def _version_policy(config: ModelConfigProto, model: str, source: str) -> VersionPolicy:
    policy = config.model_version_policy
    choice = policy.WhichOneof("policy_choice") if config.HasField("model_version_policy") else None
    if choice == "all":
        return VersionPolicy(kind="all")
    if choice == "specific":
        versions = tuple(policy.specific.versions)
        bad = [v for v in versions if v <= 0]
        if bad:
            raise ConfigError(f"{source}: model '{model}': model_version_policy specific versions must be positive, got {bad}")
        return VersionPolicy(kind="specific", versions=versions)
    if choice == "latest":
        # proto3 cannot tell 0 from unset; TensorFlow Serving serves 1 version either way.
        return VersionPolicy(kind="latest", latest=max(policy.latest.num_versions, 1))
    return VersionPolicy()


def _labels(config: ModelConfigProto, model: str, source: str) -> tuple[tuple[str, int], ...]:
    for label, version in config.version_labels.items():
        if not _LABEL.fullmatch(label):
            raise ConfigError(f"{source}: model '{model}': invalid version label '{label}': use letters, digits, '_' and '-'")
        if version <= 0:
            raise ConfigError(f"{source}: model '{model}': version label '{label}' names version {version}; versions are positive")
    return tuple(sorted(config.version_labels.items()))


def _base_path(config: ModelConfigProto, model: str, source: str, base_dir: Path) -> Path:
    if not config.base_path:
        raise ConfigError(f"{source}: model '{model}' needs a base_path (the directory holding its version directories)")
    if "://" in config.base_path:
        raise ConfigError(f"{source}: model '{model}': base_path '{config.base_path}' is a URL; tensorgate reads local "
                          "directories only (mount the bucket, or sync it to a volume)")
    return base_dir / config.base_path  # an absolute base_path stays as it is


def parse_model_server_config(text: str | bytes, source: str, base_dir: Path) -> dict[str, ConfiguredModel]:
    """The models a ModelServerConfig text lists, by name; relative base paths are taken from
    `base_dir`. Raises ConfigError naming `source` and, where it is one model's problem, the model."""
    return models_of_server_config(parse_text_proto(text, ModelServerConfig(), source), source, base_dir)


def models_of_server_config(config: ModelServerConfig, source: str, base_dir: Path) -> dict[str, ConfiguredModel]:
    """The models a ModelServerConfig message lists (a parsed file, or the config of a gRPC
    HandleReloadConfigRequest), by name; ConfigError as `parse_model_server_config`."""
    if config.WhichOneof("config") == "custom_model_config":
        raise ConfigError(f"{source}: custom_model_config is not supported; list the models in model_config_list")
    models: dict[str, ConfiguredModel] = {}
    for index, entry in enumerate(config.model_config_list.config):
        name = entry.name
        if not name:
            raise ConfigError(f"{source}: model number {index + 1} of model_config_list has no name")
        try:
            check_model_name(name)
        except BadRequest as e:
            raise ConfigError(f"{source}: {e.message}") from None
        if name in models:
            raise ConfigError(f"{source}: model '{name}' is listed twice")
        platform = _platform(entry, name, source)
        if platform != PLATFORM:
            raise ConfigError(f"{source}: model '{name}' has model_platform \"{platform}\"; tensorgate serves "
                              f"\"{PLATFORM}\" models only (GraphDefs and SavedModels)")
        models[name] = ConfiguredModel(
            name=name,
            base_path=_base_path(entry, name, source, base_dir),
            version_policy=_version_policy(entry, name, source),
            labels=_labels(entry, name, source),
        )
    return models


class ModelConfigFile:
    """The model config file and the models it held when it was last read successfully.

        >>> config_file = ModelConfigFile(Path("models.config"), poll_wait_s=60)
        >>> config_file.accept(config_file.read())     # read raises ConfigError
        >>> config_file.models["half_plus_two"].base_path
        PosixPath('/models/half_plus_two')

    `error` says why the file's current contents are not served (None while they are).
    """

    def __init__(self, path: Path | None, poll_wait_s: float = 0.0):
        # None: no file, only the models set by ModelService's HandleReloadConfigRequest (or one model
        # given by its base path, `single`).
        self.path = None if path is None else Path(path)
        self.poll_wait_s = poll_wait_s  # 0: read once, at start (TensorFlow Serving's default)
        self.models: dict[str, ConfiguredModel] = {}
        self.error: str | None = None
        self._origin = "the model server config set by HandleReloadConfigRequest"

    @classmethod
    def single(cls, name: str, base_path: Path) -> ModelConfigFile:
        """One model at `base_path`, its latest version served (TensorFlow Serving's `--model_name` and
        `--model_base_path`, which build this one-model config); ConfigError for an invalid name."""
        try:
            check_model_name(name)
        except BadRequest as e:
            raise ConfigError(f"--model_name: {e.message}") from None
        if "://" in str(base_path):
            raise ConfigError(f"--model_base_path {base_path} is a URL; tensorgate reads local directories only "
                              "(mount the bucket, or sync it to a volume)")
        config = cls(None)
        config._origin = f"the model at --model_base_path {base_path}"
        config.accept({name: ConfiguredModel(name=name, base_path=Path(base_path), version_policy=VersionPolicy())})
        return config

    @property
    def description(self) -> str:
        """What the models come from, for messages."""
        if self.path is None:
            return self._origin
        return f"model config file {self.path}"

    def read(self) -> dict[str, ConfiguredModel]:
        """Parse the file as it is now (not yet served: see `accept`)."""
        if self.path is None:
            return self.models
        try:
            text = self.path.read_bytes()
        except OSError as e:
            raise ConfigError(f"model config file {self.path}: cannot read it: {e.strerror or e}") from None
        return parse_model_server_config(text, source=f"model config file {self.path}", base_dir=self.path.absolute().parent)

    def accept(self, models: dict[str, ConfiguredModel]) -> None:
        self.models, self.error = models, None

    def reject(self, error: str) -> None:
        """Keep serving the last good models; `error` says why the file's contents are not served."""
        self.error = error
