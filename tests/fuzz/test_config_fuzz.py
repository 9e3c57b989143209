"""Config readers: a model's config.yaml (service.repository.config), and TensorFlow Serving's
text-format files: the model config file, batching parameters and monitoring config. Random and
mutated files (from the fixtures TensorFlow Serving's docs write) give a config or ConfigError naming
the file, never another exception or a hang (YAML alias bombs, deep nesting)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from service.inference.batching import BatchingOptions
from service.inference.batching_parameters import read_batching_parameters
from service.observability.monitoring_config import prometheus_path
from service.repository.config import ConfigError, parse_model_config
from service.repository.model_config_file import parse_model_server_config
from tests.fuzz.harness import MiB, call_parser, fuzz_settings
from tests.fuzz.mutations import mutated
from tests.fuzz.seeds import config_texts

CONFIG_YAML = (b"version_policy: {latest: 2}\nlabels: {stable: 1, canary: 2}\nsignatures:\n  serving_default:\n"
               b"    inputs: {features: \"features:0\"}\n    outputs: {probabilities: \"probabilities:0\"}\n"
               b"batching: {max_batch_size: 8}\ndevice: cpu\n",
               b'{"version_policy": "all", "signatures": {"s": {"outputs": {"y": "y:0"}}}}',
               b"version_policy: {specific: {versions: [1, 2]}}\n")
# A billion laughs: nine levels of nine references, 9**9 strings if anything walked it as a tree.
ALIAS_BOMB = (b'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
              + b"".join(f"{n}: &{n} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n".encode()
                         for p, n in zip("abcdefgh", "bcdefghi"))
              + b"labels: *i\nsignatures: {s: {outputs: *i}}\nversion_policy: {specific: *i}\n")
TEXTS = config_texts()


@fuzz_settings()
@given(mutated(CONFIG_YAML) | st.binary(max_size=128))
@example(ALIAS_BOMB)
@example(b"[" * 5000 + b"]" * 5000)  # deeper than the recursion limit
@example(b"device: \xff\xfe")  # not UTF-8
def test_config_yaml_parses_or_raises_config_error(data: bytes) -> None:
    call_parser(parse_model_config, data, allowed=(ConfigError,), memory_limit=256 * len(data) + 8 * MiB)


def _read_file(reader, data: bytes):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.txt"
        path.write_bytes(data)
        return call_parser(reader, path, allowed=(ConfigError,), memory_limit=256 * len(data) + 8 * MiB)


@fuzz_settings()
@given(mutated([TEXTS["models.config"]]) | st.binary(max_size=128))
@example(b"model_config_list { config { name: 'm' base_path: '/x' model_platform: 'tensorflow' "
         b"model_version_policy { specific { versions: -1 } } version_labels { key: '\\xff' value: 0 } } }")
def test_model_config_files_parse_or_raise_config_error(data: bytes) -> None:
    _read_file(lambda path: parse_model_server_config(path.read_bytes(), str(path), path.parent), data)


@fuzz_settings()
@given(mutated([TEXTS["batching_parameters.txt"]]) | st.binary(max_size=64))
@example(b"max_batch_size { value: 9223372036854775807 } allowed_batch_sizes: [-1, 0]")
def test_batching_parameters_parse_or_raise_config_error(data: bytes) -> None:
    _read_file(lambda path: read_batching_parameters(path, BatchingOptions()), data)


@fuzz_settings()
@given(mutated([TEXTS["monitoring_config.txt"]]) | st.binary(max_size=64))
def test_monitoring_config_parses_or_raises_config_error(data: bytes) -> None:
    _read_file(prometheus_path, data)
