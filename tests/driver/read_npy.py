"""Prints a float32 .npy file's shape and values."""
import ast
import struct
import sys

data = open(sys.argv[1], "rb").read()
length = struct.unpack("<H", data[8:10])[0]
header = ast.literal_eval(data[10:10 + length].decode())
values = data[10 + length:]
floats = struct.unpack(f"<{len(values) // 4}f", values)
print("shape", header["shape"], "values", " ".join(f"{x:.1f}" for x in floats))
