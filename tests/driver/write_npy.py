"""Writes DIR/NAME.npy: a float32 array of ones with the given shape, or
with --int64 V1,V2,... a one-dimensional int64 array of those values."""
import struct
import sys

directory, name, *rest = sys.argv[1:]
if rest and rest[0] == "--int64":
    values = [int(v) for v in rest[1].split(",")]
    descr, shape, payload = "<i8", (len(values),), struct.pack(f"<{len(values)}q", *values)
else:
    shape = tuple(int(d) for d in rest)
    count = 1
    for d in shape:
        count *= d
    descr, payload = "<f4", struct.pack(f"<{count}f", *([1.0] * count))
header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
with open(f"{directory}/{name}.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(payload)
