from engine.proto import tensor_shape_pb2 as _tensor_shape_pb2
from engine.proto import trackable_object_graph_pb2 as _trackable_object_graph_pb2
from engine.proto import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SavedObjectGraph(_message.Message):
    __slots__ = ("nodes", "concrete_functions")
    class ConcreteFunctionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: SavedConcreteFunction
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[SavedConcreteFunction, _Mapping]] = ...) -> None: ...
    NODES_FIELD_NUMBER: _ClassVar[int]
    CONCRETE_FUNCTIONS_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[SavedObject]
    concrete_functions: _containers.MessageMap[str, SavedConcreteFunction]
    def __init__(self, nodes: _Optional[_Iterable[_Union[SavedObject, _Mapping]]] = ..., concrete_functions: _Optional[_Mapping[str, SavedConcreteFunction]] = ...) -> None: ...

class SavedObject(_message.Message):
    __slots__ = ("children", "user_object", "asset", "function", "variable", "bare_concrete_function", "constant", "resource")
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    USER_OBJECT_FIELD_NUMBER: _ClassVar[int]
    ASSET_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    VARIABLE_FIELD_NUMBER: _ClassVar[int]
    BARE_CONCRETE_FUNCTION_FIELD_NUMBER: _ClassVar[int]
    CONSTANT_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    children: _containers.RepeatedCompositeFieldContainer[_trackable_object_graph_pb2.TrackableObjectGraph.TrackableObject.ObjectReference]
    user_object: SavedUserObject
    asset: SavedAsset
    function: SavedFunction
    variable: SavedVariable
    bare_concrete_function: SavedBareConcreteFunction
    constant: SavedConstant
    resource: SavedResource
    def __init__(self, children: _Optional[_Iterable[_Union[_trackable_object_graph_pb2.TrackableObjectGraph.TrackableObject.ObjectReference, _Mapping]]] = ..., user_object: _Optional[_Union[SavedUserObject, _Mapping]] = ..., asset: _Optional[_Union[SavedAsset, _Mapping]] = ..., function: _Optional[_Union[SavedFunction, _Mapping]] = ..., variable: _Optional[_Union[SavedVariable, _Mapping]] = ..., bare_concrete_function: _Optional[_Union[SavedBareConcreteFunction, _Mapping]] = ..., constant: _Optional[_Union[SavedConstant, _Mapping]] = ..., resource: _Optional[_Union[SavedResource, _Mapping]] = ...) -> None: ...

class SavedUserObject(_message.Message):
    __slots__ = ("identifier",)
    IDENTIFIER_FIELD_NUMBER: _ClassVar[int]
    identifier: str
    def __init__(self, identifier: _Optional[str] = ...) -> None: ...

class SavedAsset(_message.Message):
    __slots__ = ("asset_file_def_index",)
    ASSET_FILE_DEF_INDEX_FIELD_NUMBER: _ClassVar[int]
    asset_file_def_index: int
    def __init__(self, asset_file_def_index: _Optional[int] = ...) -> None: ...

class SavedFunction(_message.Message):
    __slots__ = ("concrete_functions",)
    CONCRETE_FUNCTIONS_FIELD_NUMBER: _ClassVar[int]
    concrete_functions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, concrete_functions: _Optional[_Iterable[str]] = ...) -> None: ...

class SavedConcreteFunction(_message.Message):
    __slots__ = ("bound_inputs",)
    BOUND_INPUTS_FIELD_NUMBER: _ClassVar[int]
    bound_inputs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, bound_inputs: _Optional[_Iterable[int]] = ...) -> None: ...

class SavedBareConcreteFunction(_message.Message):
    __slots__ = ("concrete_function_name",)
    CONCRETE_FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    concrete_function_name: str
    def __init__(self, concrete_function_name: _Optional[str] = ...) -> None: ...

class SavedConstant(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: str
    def __init__(self, operation: _Optional[str] = ...) -> None: ...

class SavedVariable(_message.Message):
    __slots__ = ("dtype", "shape", "trainable", "name", "device")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    TRAINABLE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    dtype: _types_pb2.DataType
    shape: _tensor_shape_pb2.TensorShapeProto
    trainable: bool
    name: str
    device: str
    def __init__(self, dtype: _Optional[_Union[_types_pb2.DataType, str]] = ..., shape: _Optional[_Union[_tensor_shape_pb2.TensorShapeProto, _Mapping]] = ..., trainable: bool = ..., name: _Optional[str] = ..., device: _Optional[str] = ...) -> None: ...

class SavedResource(_message.Message):
    __slots__ = ("device",)
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    device: str
    def __init__(self, device: _Optional[str] = ...) -> None: ...
