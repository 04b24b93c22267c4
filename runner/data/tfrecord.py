"""TFRecord shards: records of tf.train.Example as TensorFlow's ImageNet conversion writes them, and the reader
the pipeline DSL calls `readers.tfrecord`.

Each record holds `image/encoded` (the source file's bytes), `image/class/label` (int64), `image/class/text` (the
class name) and `image/filename` (class/file). The index beside each shard is DALI's (tfrecord2idx's format: one
"offset size" line per record). DALI's own readers.tfrecord takes a dict of feature specs, which a YAML step does
not write; runner's `readers.tfrecord` reads these two features and returns (encoded images, int32 labels), as
readers.file returns them, with every other argument DALI's reader takes.
"""
from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

# tfrecord and DALI are imported where records are written or read: `runner validate` reads this module for
# its names, and a torchvision run has no DALI.

IMAGE_KEY = "image/encoded"
LABEL_KEY = "image/class/label"
CLASS_KEY = "image/class/text"
NAME_KEY = "image/filename"
_HEADER = 12     # uint64 length + its masked crc32c
_FOOTER = 4      # the data's masked crc32c


class RecordWriter:
    """Appends Examples to an open file and keeps the index (offset, size) of each record."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.index: list[tuple[int, int]] = []

    def write(self, image: bytes, label: int, class_name: str, name: str) -> None:
        from tfrecord.writer import TFRecordWriter

        record = TFRecordWriter.serialize_tf_example({
            IMAGE_KEY: (image, "byte"), LABEL_KEY: (label, "int"),
            CLASS_KEY: (class_name.encode("utf-8", "surrogateescape"), "byte"),
            NAME_KEY: (name.encode("utf-8", "surrogateescape"), "byte")})
        length = struct.pack("<Q", len(record))
        start = self.stream.tell()
        self.stream.write(length + TFRecordWriter.masked_crc(length) + record + TFRecordWriter.masked_crc(record))
        self.index.append((start, self.stream.tell() - start))


def write_index(index: list[tuple[int, int]], path: Path) -> None:
    path.write_text("".join(f"{offset} {size}\n" for offset, size in index))


def parse_index(path: Path) -> list[tuple[int, int]]:
    """DALI's TFRecord index: (offset, size) per record; ValueError for a line that is not two numbers."""
    out = []
    for line in path.read_text().splitlines():
        offset, size = line.split()
        out.append((int(offset), int(size)))
    return out


def record_length(header: bytes) -> int:
    """The data length a record's 12-byte header gives (its record is that plus 16 bytes)."""
    return struct.unpack("<Q", header[:8])[0]


def read_examples(path: Path, index: list[tuple[int, int]]) -> Iterator[dict]:
    """Each record's features as {key: bytes or int}, read at the offsets of the index, one record at a time."""
    from tfrecord import example_pb2

    with open(path, "rb") as f:
        for offset, size in index:
            f.seek(offset)
            data = f.read(size)[_HEADER:-_FOOTER]
            example = example_pb2.Example()
            example.ParseFromString(data)
            features = {}
            for key, feature in example.features.feature.items():
                kind = feature.WhichOneof("kind")
                values = list(getattr(feature, kind).value) if kind else []
                features[key] = values[0] if len(values) == 1 else values
            yield features


def tfrecord(*, path, index_path, name=None, **reader_args):
    """fn.readers.tfrecord over runner's shards: (encoded images, int32 labels of shape [1])."""
    import nvidia.dali.fn as fn
    import nvidia.dali.tfrecord as tfrec
    import nvidia.dali.types as types

    out = fn.readers.tfrecord(path=path, index_path=index_path, name=name,
                              features={IMAGE_KEY: tfrec.FixedLenFeature((), tfrec.string, ""),
                                        LABEL_KEY: tfrec.FixedLenFeature([1], tfrec.int64, -1)}, **reader_args)
    return out[IMAGE_KEY], fn.cast(out[LABEL_KEY], dtype=types.INT32)
