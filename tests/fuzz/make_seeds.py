"""Writes seed inputs for the manifest and .npy fuzzers.

    make_seeds.py --linac BUILD/bin/linac --out DIR SPEC...

DIR/manifest/ gets the manifest of every spec compiled for each target;
`true` stands in for the host compiler and nvcc, as the manifest does not
depend on the kernel file. DIR/npy/ gets arrays of every dtype the reader
takes, in both header versions, and a few broken ones.
"""
import argparse
import os
import shutil
import struct
import subprocess
import tempfile


def npy(descr, shape, payload, version=1, fortran=False):
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, fortran, shape)
    size = 4 if version > 1 else 2
    header += " " * ((64 - (6 + 2 + size + len(header) + 1) % 64) % 64) + "\n"
    length = struct.pack("<I" if version > 1 else "<H", len(header))
    return (b"\x93NUMPY" + bytes([version, 0]) + length + header.encode() +
            payload)


def write_npy_seeds(out):
    os.makedirs(out, exist_ok=True)
    seeds = {
        "f4_2x3": npy("<f4", (2, 3), struct.pack("<6f", *range(6))),
        "f8_4": npy("<f8", (4,), struct.pack("<4d", 1, -2, 3.5, 1e300)),
        "i4_3": npy("<i4", (3,), struct.pack("<3i", 0, 3, 7)),
        "i8_3": npy("<i8", (3,), struct.pack("<3q", 0, 3, 7)),
        "f4_scalar": npy("<f4", (), struct.pack("<f", 1.5)),
        "f4_empty": npy("<f4", (0, 4), b""),
        "f4_v2": npy("<f4", (1, 2, 1, 2), struct.pack("<4f", 1, 2, 3, 4), 2),
        "f4_v3": npy("<f4", (2,), struct.pack("<2f", 1, 2), 3),
        "fortran": npy("<f4", (2, 2), struct.pack("<4f", 1, 2, 3, 4),
                       fortran=True),
        "big_endian": npy(">f4", (2,), struct.pack(">2f", 1, 2)),
        "short": npy("<f4", (8,), struct.pack("<2f", 1, 2)),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name + ".npy"), "wb") as f:
            f.write(data)


def write_manifest_seeds(linac, specs, out):
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, CXX="true", NVCC="true")
    with tempfile.TemporaryDirectory() as work:
        env["LINAC_CACHE_DIR"] = os.path.join(work, "cache")
        for spec in specs:
            name = os.path.splitext(os.path.basename(spec))[0]
            for target in ("cpu", "sm_90a", "sm_80"):
                package = os.path.join(work, "%s_%s.linac" % (name, target))
                done = subprocess.run(
                    [linac, "compile", spec, "--target", target, "-o", package],
                    env=env, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
                manifest = os.path.join(package, "manifest.json")
                if done.returncode == 0 and os.path.exists(manifest):
                    shutil.copy(manifest, os.path.join(
                        out, "%s_%s.json" % (name, target)))
    if not os.listdir(out):
        raise SystemExit("make_seeds.py: %s compiled no spec" % linac)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--linac", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("specs", nargs="+")
    args = parser.parse_args()
    write_manifest_seeds(args.linac, args.specs,
                         os.path.join(args.out, "manifest"))
    write_npy_seeds(os.path.join(args.out, "npy"))


if __name__ == "__main__":
    main()
