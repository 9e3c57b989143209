"""A model's configuration: the optional `<model>/config.yaml` of the repository.

    version_policy: {latest: 2}        # or `all`, or {specific: [1, 3]}
    labels: {stable: 1, canary: 2}
    signatures:
      serving_default:
        inputs: {x: "x:0"}
        outputs: {y: "y:0"}
    device: gpu                        # or cpu, cpu:N, gpu:N; default: the server's --device
    resident: true                     # always loaded: not lazily, never evicted or unloaded when idle

Unknown keys are errors (a typo must not silently change what is served), and so are device names
that are not device names; `batching` is accepted and kept for the batching options to check.

TensorFlow Serving's own config files (a models.config, a batching parameters file, a monitoring
config) are protobuf text; `parse_text_proto` reads them, with errors naming the file, line and field.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import yaml
from google.protobuf import text_format
from google.protobuf.message import Message
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from engine.devices import parse_device

__all__ = [
    "ConfigError",
    "VersionPolicy",
    "SignatureConfig",
    "ModelConfig",
    "parse_model_config",
    "dump_model_config",
    "parse_text_proto",
]


class ConfigError(ValueError):
    """A config file that cannot be used (a model's config.yaml, or one of TensorFlow Serving's text
    protos); the message names the file and the problem."""


class VersionPolicy(BaseModel):
    """Which of the versions on disk are served (TensorFlow Serving's ServableVersionPolicy)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["latest", "all", "specific"] = "latest"
    latest: int = Field(1, ge=1)
    versions: tuple[int, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _from_yaml(cls, value: Any) -> Any:
        # The YAML forms: `all`, {latest: N}, {specific: [..]} (or TF Serving's {specific: {versions: [..]}}).
        if value == "all" or (isinstance(value, dict) and set(value) == {"all"}):
            return {"kind": "all"}
        if isinstance(value, dict) and value and "kind" not in value:
            if set(value) == {"latest"}:
                return {"kind": "latest", "latest": value["latest"]}
            if set(value) == {"specific"}:
                versions = value["specific"]
                if isinstance(versions, dict) and set(versions) == {"versions"}:
                    versions = versions["versions"]
                return {"kind": "specific", "versions": versions}
            raise ValueError("version_policy must be `all`, {latest: N} or {specific: [versions]}")
        return value

    def select(self, available: Iterable[int]) -> set[int]:
        """The versions to serve out of those available on disk."""
        versions = sorted(set(available))
        if self.kind == "all":
            return set(versions)
        if self.kind == "specific":
            return set(versions) & set(self.versions)
        return set(versions[-self.latest :])

    def describe(self) -> str:
        if self.kind == "latest":
            return f"latest: {self.latest}"
        if self.kind == "specific":
            return f"specific: {list(self.versions)}"
        return "all"

    def to_yaml(self) -> Any:
        if self.kind == "all":
            return "all"
        if self.kind == "specific":
            return {"specific": list(self.versions)}
        return {"latest": self.latest}


class SignatureConfig(BaseModel):
    """A signature: input aliases and output aliases, each naming a graph tensor (`node` or `node:i`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    inputs: dict[str, str] = Field(default_factory=dict)
    outputs: dict[str, str]

    @field_validator("outputs")
    @classmethod
    def _some_outputs(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("a signature needs at least one output")
        return value


class ModelConfig(BaseModel):
    """The parsed config.yaml; an absent file is `ModelConfig()` (default signature, latest version)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version_policy: VersionPolicy = Field(default_factory=VersionPolicy)
    labels: dict[str, int] = Field(default_factory=dict)
    signatures: dict[str, SignatureConfig] = Field(default_factory=dict)
    batching: dict[str, Any] | None = None
    # The device this model's versions run on; None: the server's default (`--device`). Whether the
    # device exists is checked when a version loads, so that a model meant for a GPU fails alone.
    device: str | None = None
    # The classification extension's labels of an output, a label per class index (Triton's label_filename).
    output_labels: dict[str, list[str]] = Field(default_factory=dict)
    # Triton's reshape: an input's array is reshaped to this on its way into the graph, an output's on its
    # way out to the client (-1: the batch, or another size inferred from the element count).
    reshape: dict[str, list[int]] = Field(default_factory=dict)
    # The tags of the MetaGraph a SavedModel version loads; None: the server's (`saved_model_tags`).
    saved_model_tags: list[str] | None = None
    # Keep this model's versions loaded: loaded at once even with lazy loading, never evicted for the memory
    # budget nor unloaded for idleness (ModelMesh and Triton users' "pinned" models).
    resident: bool = False

    @field_validator("device")
    @classmethod
    def _device_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parse_device(value)  # DeviceError, a ValueError: reported as a config error naming the key
        return value.strip()

    def serving_fields(self) -> tuple:
        """What a loaded version depends on; labels and policy can change without reloading."""
        return (self.signatures, self.batching, self.device, self.output_labels, self.reshape, self.saved_model_tags)


def parse_model_config(text: str | bytes, source: str = "config.yaml") -> ModelConfig:
    """Parse config.yaml text (YAML, or JSON, which YAML reads too); raises ConfigError naming `source`."""
    _check_nesting(text, source)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}") from None
    except RecursionError:  # PyYAML's parser recurses once per level of nesting
        raise ConfigError(f"{source}: not valid YAML: nested too deeply") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(doc).__name__}")
    try:
        return ModelConfig.model_validate(doc)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {_message(err)}" for err in e.errors())
        raise ConfigError(f"{source}: {problems}") from None


_MAX_FLOW_NESTING = 64


def _check_nesting(text: str | bytes, source: str) -> None:
    """ConfigError for `[`/`{` nested deeper than any config needs: PyYAML's parser takes time
    growing with the cube of the depth (a 5000-deep line takes minutes) before it runs out of stack."""
    depth = 0
    for char in text.encode("utf-8", "replace") if isinstance(text, str) else text:
        if char in b"[{":
            depth += 1
            if depth > _MAX_FLOW_NESTING:
                raise ConfigError(f"{source}: not valid YAML: [ and {{ nested more than {_MAX_FLOW_NESTING} deep")
        elif char in b"]}":
            depth = max(0, depth - 1)


def _message(error: dict) -> str:
    # Our validators' ValueErrors read better without pydantic's "Value error, " in front.
    if error["type"] == "value_error" and error["msg"].startswith("Value error, "):
        return error["msg"][len("Value error, "):]
    return error["msg"]


def dump_model_config(config: ModelConfig) -> str:
    """config.yaml text for `config`, writing only the keys that differ from the defaults."""
    doc: dict[str, Any] = {}
    if config.version_policy != VersionPolicy():
        doc["version_policy"] = config.version_policy.to_yaml()
    if config.labels:
        doc["labels"] = dict(config.labels)
    if config.signatures:
        doc["signatures"] = {name: {"inputs": dict(s.inputs), "outputs": dict(s.outputs)} for name, s in config.signatures.items()}
    if config.batching is not None:
        doc["batching"] = config.batching
    if config.device is not None:
        doc["device"] = config.device
    if config.output_labels:
        doc["output_labels"] = {k: list(v) for k, v in config.output_labels.items()}
    if config.reshape:
        doc["reshape"] = {k: list(v) for k, v in config.reshape.items()}
    if config.saved_model_tags is not None:
        doc["saved_model_tags"] = list(config.saved_model_tags)
    if config.resident:
        doc["resident"] = True
    return yaml.safe_dump(doc, sort_keys=False)


def parse_text_proto(text: str | bytes, message: Message, source: str) -> Message:
    """Fill `message` from protobuf text format, as TensorFlow Serving reads its config files
    (`ParseProtoTextFile`); raises ConfigError naming `source`, the line and column, and the field."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        text_format.Parse(text, message)
    except UnicodeDecodeError as e:
        raise ConfigError(f"{source}: not UTF-8 text: {e}") from None
    except text_format.ParseError as e:
        where = f"line {e.GetLine()}, column {e.GetColumn()}: " if e.GetLine() is not None else ""
        # Our copies of TensorFlow Serving's schemas live in package tensorgate.serving; the message
        # names protobuf's parser prints in TensorFlow Serving (which its tests and users look for) are
        # tensorflow.serving's.
        problem = str(e).split(" : ", 1)[-1].replace('"tensorgate.serving.', '"tensorflow.serving.')
        name = message.DESCRIPTOR.full_name.replace("tensorgate.serving.", "tensorflow.serving.")
        raise ConfigError(f"{source}: Error parsing text-format {name}: {where}{problem}") from None
    return message
