"""Our copies of TensorFlow Serving's, TensorFlow's and Triton's schemas are theirs on the wire.

tensorgate keeps its own copies of the schemas it speaks (service/protocols/proto, engine/proto) in packages of
its own (`tensorflow.serving` -> `tensorgate.serving`, `tensorflow` -> `tensorgate`, `tensorflow.error` ->
`tensorgate.error`, `inference` -> `tensorgate.inference`), so that they can share a process with
tensorflow-serving-api's and tritonclient's modules. The package is all that may differ. Every message, enum and
service of theirs that we copy is held to the real one: each field's name, number, type, label and presence,
containing oneof (proto3 `optional` included), json_name (explicit or derived), packed encoding, map-ness and
message or enum type (package mapped); each enum value's name and number; each method's name, types and
streaming. Whatever we do differently is listed below with the reason, and the lists may not go stale. A message
built with the real classes parses into ours with the same fields, and back to the same bytes.

The real schemas: TensorFlow Serving's, and the TensorFlow files they import, from
tests/fixtures/serving_api/tensorflow_serving_apis.binpb (a FileDescriptorSet that tools/fixtures/serving_api.py
writes from tensorflow-serving-api 2.21's own modules), so TensorFlow is not needed here; Triton's from
tritonclient's generated modules.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

ROOT = Path(__file__).resolve().parents[3]
SERVING_API = ROOT / "tests" / "fixtures" / "serving_api" / "tensorflow_serving_apis.binpb"
OUR_PROTO_PACKAGES = {"engine.proto": ROOT / "engine" / "proto",
                      "service.protocols.proto": ROOT / "service" / "protocols" / "proto"}

# Their package -> ours. protobuf's own (Any, the wrappers) are shared, not copied.
PACKAGES = {
    "tensorflow.serving": "tensorgate.serving",
    "tensorflow.error": "tensorgate.error",
    "tensorflow": "tensorgate",
    "inference": "tensorgate.inference",
    "google.protobuf": "google.protobuf",
}

# The real files whose every message, enum and service tensorgate must have (less NOT_COPIED): what its
# servers, clients and config files speak, and what its SavedModel and checkpoint readers parse.
REQUIRED_FILES = {
    *(f"tensorflow_serving/apis/{name}.proto" for name in (
        "model", "predict", "input", "classification", "regression", "inference", "get_model_metadata",
        "get_model_status", "model_management", "model_service", "prediction_service", "logging",
        "prediction_log", "status")),
    *(f"tensorflow_serving/config/{name}.proto" for name in (
        "model_server_config", "file_system_storage_path_source", "logging_config", "log_collector_config",
        "monitoring_config")),
    "tensorflow_serving/servables/tensorflow/session_bundle_config.proto",
    "xla/tsl/protobuf/error_codes.proto",
    *(f"tensorflow/core/framework/{name}.proto" for name in (
        "tensor", "tensor_shape", "types", "resource_handle", "attr_value", "node_def", "op_def", "function",
        "graph", "versions", "tensor_slice")),
    *(f"tensorflow/core/example/{name}.proto" for name in ("example", "feature")),
    *(f"tensorflow/core/protobuf/{name}.proto" for name in (
        "meta_graph", "saved_model", "saver", "struct", "saved_object_graph", "trackable_object_graph",
        "tensor_bundle")),
    "grpc_service.proto",
    "model_config.proto",
}

# Messages of REQUIRED_FILES we have no copy of, and why.
NOT_COPIED = {
    "tensorflow.SerializedDType": "a DataType wrapped for tf.types' own serialization; nothing we read holds one",
    "tensorflow.serving.SessionBundleConfig": "TensorFlow's session setup (ConfigProto, thread pools, TFLite), "
                                              "which tensorgate does not take; it reads BatchingParameters",
    "tensorflow.serving.ModelWarmupOptions": "a SessionBundleConfig field",
    # The types of fields left out below (OMITTED_FIELDS).
    "tensorflow.TrackableObjectGraph.TrackableObject.SlotVariableReference": "TrackableObject.slot_variables",
    "tensorflow.RegisteredSaver": "TrackableObject.registered_saver",
    "tensorflow.SavedObject.SaveableObjectsEntry": "SavedObject.saveable_objects",
    "tensorflow.SaveableObject": "SavedObject.saveable_objects",
    "tensorflow.CapturedTensor": "SavedObject.captured_tensor",
    "tensorflow.FunctionSpec": "SavedFunction.function_spec, SavedBareConcreteFunction.function_spec",
    "tensorflow.FunctionSpec.JitCompile": "FunctionSpec",
}

# Fields our copies leave out on purpose (each .proto says so). On the wire such a field is an unknown field:
# parsed, kept and written back unchanged, never read.
_UNREAD = "not read by tensorgate; kept as an unknown field"
OMITTED_FIELDS = {
    # engine/proto/graph.proto, node_def.proto, op_def.proto: full types and debug info.
    "tensorflow.GraphDef.debug_info": _UNREAD,
    "tensorflow.NodeDef.experimental_type": _UNREAD,
    "tensorflow.OpDef.ArgDef.experimental_full_type": _UNREAD,
    # engine/proto/meta_graph.proto.
    "tensorflow.MetaGraphDef.MetaInfoDef.stripped_op_list": _UNREAD,
    "tensorflow.MetaGraphDef.MetaInfoDef.any_info": _UNREAD,
    # engine/proto/trackable_object_graph.proto: what a checkpoint's object graph says beyond the variables.
    **{f"tensorflow.TrackableObjectGraph.TrackableObject.{name}": _UNREAD
       for name in ("slot_variables", "registered_saver", "has_checkpoint_values")},
    # engine/proto/saved_object_graph.proto: "only what tensorgate reads is spelled out".
    **{f"tensorflow.SavedObject.{name}": _UNREAD for name in (
        "dependencies", "slot_variables", "captured_tensor", "saveable_objects", "registered_name",
        "serialized_user_proto", "registered_saver")},
    "tensorflow.SavedUserObject.version": _UNREAD,
    "tensorflow.SavedUserObject.metadata": _UNREAD,
    "tensorflow.SavedFunction.function_spec": _UNREAD,
    "tensorflow.SavedConcreteFunction.canonicalized_input_signature": _UNREAD,
    "tensorflow.SavedConcreteFunction.output_signature": _UNREAD,
    **{f"tensorflow.SavedBareConcreteFunction.{name}": _UNREAD
       for name in ("argument_keywords", "allowed_positional_arguments", "function_spec")},
    **{f"tensorflow.SavedVariable.{name}": _UNREAD
       for name in ("synchronization", "aggregation", "experimental_distributed_variable_components")},
}

# Fields whose type our copy replaces with one that reads the same bytes: "bytes" for a message left
# serialized (both are length-delimited), or our message standing in for theirs, itself compared field by field.
SUBSTITUTED_FIELDS = {
    # prediction_log.proto: SessionRunRequest/Response are TensorFlow's session API (config.proto), which
    # warm-up refuses; kept serialized.
    "tensorflow.serving.SessionRunLog.request": "bytes",
    "tensorflow.serving.SessionRunLog.response": "bytes",
    # meta_graph.proto: google.protobuf.Any spelled out as AnyValue, field for field.
    "tensorflow.CollectionDef.AnyList.value": "tensorgate.AnyValue",
}

# Differences from the real schemas that are not on purpose: reported, to be fixed in the .proto files. Each
# entry must still differ (remove it once the copy is fixed).
KNOWN_DIFFERENCES = {
    # engine/proto/types.proto lacks DataType values TensorFlow 2.21 has. The enum is open, so such a dtype
    # still parses (as its number), but it has no name in our copy (nor in JSON).
    **{f"tensorflow.DataType.{name}{ref}": "missing DataType value" for ref in ("", "_REF") for name in (
        "DT_FLOAT8_E4M3FNUZ", "DT_FLOAT8_E4M3B11FNUZ", "DT_FLOAT8_E5M2FNUZ", "DT_INT2", "DT_UINT2",
        "DT_FLOAT4_E2M1FN")},
}


# --- the two sides --------------------------------------------------------------------------------------------


def our_pool() -> descriptor_pool.DescriptorPool:
    """The default pool, holding every generated module of engine/proto and service/protocols/proto."""
    for package, folder in OUR_PROTO_PACKAGES.items():
        for module in sorted(folder.glob("*_pb2.py")):
            importlib.import_module(f"{package}.{module.stem}")
    return descriptor_pool.Default()


def serving_files() -> tuple[descriptor_pool.DescriptorPool, list]:
    """TensorFlow Serving's files (and what they import) in a pool of their own, as the fixture lists them."""
    fixture = descriptor_pb2.FileDescriptorSet.FromString(SERVING_API.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for file in fixture.file:
        pool.Add(file)
    return pool, [pool.FindFileByName(file.name) for file in fixture.file]


def triton_files() -> list:
    service = pytest.importorskip("tritonclient.grpc.service_pb2")
    model_config = pytest.importorskip("tritonclient.grpc.model_config_pb2")
    return [model_config.DESCRIPTOR, service.DESCRIPTOR]


SIDES = {"tensorflow-serving": lambda: serving_files()[1], "triton": triton_files}


def side_of(name: str) -> str:
    return "triton" if name.startswith("inference.") else "tensorflow-serving"


def ours_name(descriptor) -> str | None:
    """The full name of our copy of a real message, enum or service (None outside the mapped packages)."""
    package = descriptor.file.package
    if package not in PACKAGES:
        return None
    return PACKAGES[package] + descriptor.full_name[len(package):]


def full_name(descriptor) -> str:
    return descriptor.full_name


def find_ours(pool, real):
    """Our copy of a real descriptor, or None."""
    name = ours_name(real)
    if hasattr(real, "methods"):
        find = pool.FindServiceByName
    elif hasattr(real, "values"):
        find = pool.FindEnumTypeByName
    else:
        find = pool.FindMessageTypeByName
    try:
        return None if name is None else find(name)
    except KeyError:
        return None


def walk(file):
    """Every message (nested ones too), enum and service a file defines."""

    def messages(descriptors):
        for message in descriptors:
            yield message
            yield from message.enum_types
            yield from messages(message.nested_types)

    yield from messages(file.message_types_by_name.values())
    yield from file.enum_types_by_name.values()
    yield from file.services_by_name.values()


# --- comparing: each difference is (the real element's full name, what differs) -------------------------------


def field_shape(field, name_of) -> dict:
    """What decides a field's bytes on the wire (and its JSON); `name_of` names message and enum types in
    our packages."""
    referred = field.message_type or field.enum_type
    return {
        "name": field.name,
        "type": field.type,
        "label": "repeated" if field.is_repeated else "required" if field.is_required else "optional",
        "has_presence": field.has_presence,
        "oneof": field.containing_oneof.name if field.containing_oneof else None,
        "json_name": field.json_name,
        "packed": field.is_packed,
        "type_name": name_of(referred) if referred else None,
        "map": bool(field.message_type and field.message_type.GetOptions().map_entry),
    }


def field_differences(real, ours) -> list[tuple[str, str]]:
    where = f"{real.containing_type.full_name}.{real.name}"
    theirs, mine = field_shape(real, ours_name), field_shape(ours, full_name)
    found = []
    stand_in = SUBSTITUTED_FIELDS.get(where)
    if stand_in == "bytes":  # a message kept serialized: same wire type, no presence, no type name
        if (real.type, ours.type) != (real.TYPE_MESSAGE, ours.TYPE_BYTES):
            found.append((where, "is not a message read as bytes"))
        theirs = {k: v for k, v in theirs.items() if k not in ("type", "type_name", "has_presence")}
    elif stand_in is not None:  # our message in place of theirs: the same fields
        if mine["type_name"] != stand_in:
            found.append((where, f"type is {mine['type_name']}, not the stand-in {stand_in}"))
        else:
            found += message_differences(real.message_type, ours.message_type)
        theirs = {k: v for k, v in theirs.items() if k != "type_name"}
    return found + [(where, f"{key} is {mine[key]!r}, theirs {theirs[key]!r}") for key in theirs
                    if mine[key] != theirs[key]]


def reserved_numbers(message) -> set[int]:
    proto = descriptor_pb2.DescriptorProto()
    message.CopyToProto(proto)
    return {n for r in proto.reserved_range for n in range(r.start, r.end)}


def message_differences(real, ours) -> list[tuple[str, str]]:
    """How our copy of a message differs from the real one (nested messages and enums too)."""
    found = []
    for number, field in real.fields_by_number.items():
        if number in ours.fields_by_number:
            found += field_differences(field, ours.fields_by_number[number])
        elif f"{real.full_name}.{field.name}" not in OMITTED_FIELDS:
            found.append((f"{real.full_name}.{field.name}", f"= {number} is missing"))
    for number, field in ours.fields_by_number.items():
        if number not in real.fields_by_number:
            why = "reserved" if number in reserved_numbers(real) else "not a field"
            found.append((f"{real.full_name}.{field.name}", f"= {number} is ours only ({why} in theirs)"))
    for nested in [*real.nested_types, *real.enum_types]:
        mine = ours.nested_types_by_name.get(nested.name) or ours.enum_types_by_name.get(nested.name)
        if mine is None:
            if nested.full_name not in NOT_COPIED:
                found.append((nested.full_name, "is missing"))
        elif hasattr(nested, "values"):
            found += enum_differences(nested, mine)
        else:
            found += message_differences(nested, mine)
    return found


def enum_differences(real, ours) -> list[tuple[str, str]]:
    theirs = {v.name: v.number for v in real.values}
    mine = {v.name: v.number for v in ours.values}
    found = [(f"{real.full_name}.{name}", f"is {mine.get(name)!r}, theirs {number}")
             for name, number in theirs.items() if mine.get(name) != number]
    found += [(f"{real.full_name}.{name}", f"= {number} is ours only") for name, number in mine.items()
              if name not in theirs]
    if real.is_closed != ours.is_closed:
        found.append((real.full_name, f"closed is {ours.is_closed}, theirs {real.is_closed}"))
    return found


def service_differences(real, ours) -> list[tuple[str, str]]:
    def shape(method, name_of):
        return (name_of(method.input_type), name_of(method.output_type), method.client_streaming,
                method.server_streaming)

    theirs = {m.name: shape(m, ours_name) for m in real.methods}
    mine = {m.name: shape(m, full_name) for m in ours.methods}
    return [(f"{real.full_name}.{name}", f"(input, output, client streaming, server streaming) is "
             f"{mine.get(name)}, theirs {theirs.get(name)}") for name in sorted(theirs | mine)
            if mine.get(name) != theirs.get(name)]


def differences(real, ours) -> list[tuple[str, str]]:
    if hasattr(real, "methods"):
        return service_differences(real, ours)
    if hasattr(real, "values"):
        return enum_differences(real, ours)
    return message_differences(real, ours)


# --- the schemas ----------------------------------------------------------------------------------------------


def test_the_fixture_holds_tensorflow_servings_files():
    names = {file.name for file in serving_files()[1]}
    wanted = {name for name in REQUIRED_FILES if "/" in name}  # Triton's come from tritonclient
    assert wanted <= names, f"not in {SERVING_API.name}: {sorted(wanted - names)}"


@pytest.mark.parametrize("side", SIDES)
def test_every_copy_is_theirs_field_by_field(side):
    pool = our_pool()
    found, compared = [], 0
    for file in SIDES[side]():
        for real in walk(file):
            if getattr(real, "containing_type", None) is not None:
                continue  # nested types are compared with the message holding them
            ours = find_ours(pool, real)
            if ours is not None:
                compared += 1
                found += differences(real, ours)
    assert compared >= (100 if side == "tensorflow-serving" else 30)
    unexpected = [f"{where} {what}" for where, what in found if where not in KNOWN_DIFFERENCES]
    assert not unexpected, "our schemas differ from theirs:\n" + "\n".join(unexpected)
    fixed = {k for k in KNOWN_DIFFERENCES if side_of(k) == side} - {where for where, _ in found}
    assert not fixed, f"no longer different (remove from KNOWN_DIFFERENCES): {sorted(fixed)}"


@pytest.mark.parametrize("side", SIDES)
def test_the_allowlists_name_real_fields_we_lack(side):
    """OMITTED_FIELDS and SUBSTITUTED_FIELDS name fields of theirs, and an omitted field is absent from ours."""
    pool = our_pool()
    real_pool = serving_files()[0] if side == "tensorflow-serving" else descriptor_pool.Default()
    for where in [*OMITTED_FIELDS, *SUBSTITUTED_FIELDS]:
        if side_of(where) != side:
            continue
        message_name, field_name = where.rsplit(".", 1)
        real = real_pool.FindMessageTypeByName(message_name)
        assert field_name in real.fields_by_name, f"{where} is not a field of theirs"
        ours = find_ours(pool, real)
        assert ours is not None, f"no copy of {message_name}"
        if where in OMITTED_FIELDS:
            assert real.fields_by_name[field_name].number not in ours.fields_by_number, f"{where} is in our copy"


@pytest.mark.parametrize("side", SIDES)
def test_the_server_has_a_copy_of_every_message_it_speaks(side):
    pool = our_pool()
    missing, not_needed, listed = [], [], set()
    for file in SIDES[side]():
        for real in walk(file):
            if ours_name(real) is None or find_ours(pool, real) is not None:
                continue
            if file.name not in REQUIRED_FILES:
                not_needed.append(real.full_name)
            elif real.full_name in NOT_COPIED:
                listed.add(real.full_name)
            else:
                missing.append(real.full_name)
    print(f"{side}: no copy of {len(not_needed)} messages, enums and services outside REQUIRED_FILES: {not_needed}")
    assert not missing, f"no copy of {missing}"
    stale = {name for name in NOT_COPIED if side_of(name) == side} - listed
    assert not stale, f"copied, or not theirs (remove from NOT_COPIED): {sorted(stale)}"


# --- the bytes ------------------------------------------------------------------------------------------------


def assert_same_message(real, ours_class):
    """`real` serialized, parsed by our class: the same fields (as JSON), the same bytes back, and theirs again."""
    data = real.SerializeToString(deterministic=True)
    ours = ours_class.FromString(data)
    assert json_format.MessageToDict(ours) == json_format.MessageToDict(real)
    assert ours.SerializeToString(deterministic=True) == data
    assert type(real).FromString(ours.SerializeToString()) == real
    return ours


def test_a_tensorflow_serving_predict_request_reads_the_same():
    from engine.proto import types_pb2
    from service.protocols.proto import predict_pb2

    pool, _ = serving_files()
    PredictRequest = message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.serving.PredictRequest"))
    dtype = pool.FindEnumTypeByName("tensorflow.DataType").values_by_name
    real = PredictRequest()
    real.model_spec.name = "half_plus_two"
    real.model_spec.version.value = 3
    real.model_spec.signature_name = "serving_default"
    x = real.inputs["x"]
    x.dtype = dtype["DT_FLOAT"].number
    x.tensor_shape.dim.add(size=2)
    x.tensor_shape.dim.add(size=3)
    x.tensor_content = np.arange(6, dtype=np.float32).tobytes()
    words = real.inputs["words"]
    words.dtype = dtype["DT_STRING"].number
    words.tensor_shape.dim.add(size=2)
    words.string_val.extend([b"caf\xc3\xa9", b"\xff\x00"])
    real.output_filter.append("y")

    ours = assert_same_message(real, predict_pb2.PredictRequest)
    assert ours.model_spec.version.value == 3 and ours.model_spec.WhichOneof("version_choice") == "version"
    assert [d.size for d in ours.inputs["x"].tensor_shape.dim] == [2, 3]
    assert ours.inputs["x"].dtype == types_pb2.DT_FLOAT
    np.testing.assert_array_equal(np.frombuffer(ours.inputs["x"].tensor_content, np.float32), np.arange(6))
    assert list(ours.inputs["words"].string_val) == [b"caf\xc3\xa9", b"\xff\x00"]


def test_a_triton_infer_request_reads_the_same():
    service = pytest.importorskip("tritonclient.grpc.service_pb2")
    from service.protocols.proto import grpc_service_pb2

    real = service.ModelInferRequest(model_name="resnet", model_version="2", id="request-7")
    real.parameters["sequence_id"].int64_param = -42
    real.parameters["priority"].uint64_param = 2**63
    real.parameters["sequence_start"].bool_param = True
    real.parameters["note"].string_param = "zürich"
    real.parameters["scale"].double_param = 0.25
    tensor = real.inputs.add(name="INPUT0", datatype="FP32", shape=[2, 2])
    tensor.parameters["binary_data_size"].int64_param = 16
    real.outputs.add(name="OUTPUT0").parameters["classification"].int64_param = 2
    real.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())

    ours = assert_same_message(real, grpc_service_pb2.ModelInferRequest)
    assert {k: v.WhichOneof("parameter_choice") for k, v in ours.parameters.items()} == {
        "sequence_id": "int64_param", "priority": "uint64_param", "sequence_start": "bool_param",
        "note": "string_param", "scale": "double_param"}
    assert ours.parameters["priority"].uint64_param == 2**63
    assert list(ours.inputs[0].shape) == [2, 2] and ours.inputs[0].datatype == "FP32"
    np.testing.assert_array_equal(np.frombuffer(ours.raw_input_contents[0], np.float32), np.arange(4))
