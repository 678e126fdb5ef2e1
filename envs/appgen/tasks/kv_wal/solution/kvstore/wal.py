"""The write-ahead log file."""

import os

from kvstore.records import decode_records, encode_record


class WriteAheadLog:
    def __init__(self, path):
        self.path = path
        if not os.path.exists(path):
            open(path, "wb").close()

    def _data(self):
        with open(self.path, "rb") as f:
            return f.read()

    def append(self, op):
        with open(self.path, "ab") as f:
            f.write(encode_record(op))
            f.flush()
            os.fsync(f.fileno())

    def read(self):
        return decode_records(self._data())[0]

    def repair(self):
        data = self._data()
        _, valid = decode_records(data)
        if valid < len(data):
            with open(self.path, "r+b") as f:
                f.truncate(valid)
                f.flush()
                os.fsync(f.fileno())
        return len(data) - valid

    def clear(self):
        with open(self.path, "wb") as f:
            f.flush()
            os.fsync(f.fileno())

    def size(self):
        return os.path.getsize(self.path)
