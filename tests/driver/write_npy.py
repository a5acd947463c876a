"""Writes DIR/NAME.npy: a float32 array of ones with the given shape."""
import struct
import sys

directory, name, *dims = sys.argv[1:]
shape = tuple(int(d) for d in dims)
count = 1
for d in shape:
    count *= d
header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % (shape,)
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
with open(f"{directory}/{name}.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack(f"<{count}f", *([1.0] * count)))
