from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class RawQueryRequest(_message.Message):
    __slots__ = ("flatbuffer",)
    FLATBUFFER_FIELD_NUMBER: _ClassVar[int]
    flatbuffer: bytes
    def __init__(self, flatbuffer: _Optional[bytes] = ...) -> None: ...

class RawQueryResponse(_message.Message):
    __slots__ = ("flatbuffer",)
    FLATBUFFER_FIELD_NUMBER: _ClassVar[int]
    flatbuffer: bytes
    def __init__(self, flatbuffer: _Optional[bytes] = ...) -> None: ...

class TransformRequest(_message.Message):
    __slots__ = ("flatbuffer",)
    FLATBUFFER_FIELD_NUMBER: _ClassVar[int]
    flatbuffer: bytes
    def __init__(self, flatbuffer: _Optional[bytes] = ...) -> None: ...

class TransformResponse(_message.Message):
    __slots__ = ("flatbuffer",)
    FLATBUFFER_FIELD_NUMBER: _ClassVar[int]
    flatbuffer: bytes
    def __init__(self, flatbuffer: _Optional[bytes] = ...) -> None: ...
