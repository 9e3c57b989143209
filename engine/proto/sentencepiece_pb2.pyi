from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TrainerSpec(_message.Message):
    __slots__ = ("unk_piece", "bos_piece", "eos_piece", "pad_piece")
    UNK_PIECE_FIELD_NUMBER: _ClassVar[int]
    BOS_PIECE_FIELD_NUMBER: _ClassVar[int]
    EOS_PIECE_FIELD_NUMBER: _ClassVar[int]
    PAD_PIECE_FIELD_NUMBER: _ClassVar[int]
    unk_piece: bytes
    bos_piece: bytes
    eos_piece: bytes
    pad_piece: bytes
    def __init__(self, unk_piece: _Optional[bytes] = ..., bos_piece: _Optional[bytes] = ..., eos_piece: _Optional[bytes] = ..., pad_piece: _Optional[bytes] = ...) -> None: ...

class ModelProto(_message.Message):
    __slots__ = ("trainer_spec",)
    TRAINER_SPEC_FIELD_NUMBER: _ClassVar[int]
    trainer_spec: TrainerSpec
    def __init__(self, trainer_spec: _Optional[_Union[TrainerSpec, _Mapping]] = ...) -> None: ...

class SentencePieceText(_message.Message):
    __slots__ = ("text", "pieces", "score")
    class SentencePiece(_message.Message):
        __slots__ = ("piece", "id", "surface", "begin", "end")
        PIECE_FIELD_NUMBER: _ClassVar[int]
        ID_FIELD_NUMBER: _ClassVar[int]
        SURFACE_FIELD_NUMBER: _ClassVar[int]
        BEGIN_FIELD_NUMBER: _ClassVar[int]
        END_FIELD_NUMBER: _ClassVar[int]
        piece: bytes
        id: int
        surface: bytes
        begin: int
        end: int
        def __init__(self, piece: _Optional[bytes] = ..., id: _Optional[int] = ..., surface: _Optional[bytes] = ..., begin: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PIECES_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    text: bytes
    pieces: _containers.RepeatedCompositeFieldContainer[SentencePieceText.SentencePiece]
    score: float
    def __init__(self, text: _Optional[bytes] = ..., pieces: _Optional[_Iterable[_Union[SentencePieceText.SentencePiece, _Mapping]]] = ..., score: _Optional[float] = ...) -> None: ...

class NBestSentencePieceText(_message.Message):
    __slots__ = ("nbests",)
    NBESTS_FIELD_NUMBER: _ClassVar[int]
    nbests: _containers.RepeatedCompositeFieldContainer[SentencePieceText]
    def __init__(self, nbests: _Optional[_Iterable[_Union[SentencePieceText, _Mapping]]] = ...) -> None: ...
