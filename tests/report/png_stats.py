#!/usr/bin/env python3
"""png_stats.py FILE: prints "<width> <height> <non-white share> <distinct colours>" of an 8-bit RGB/RGBA PNG
(the screenshot Chromium writes), decoding it with the standard library (zlib and the five PNG filters)."""
import struct
import sys
import zlib


def decode(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, ihdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype = ihdr[0], ihdr[1], ihdr[2], ihdr[3]
    assert depth == 8 and ctype in (2, 6), "expects 8-bit RGB or RGBA"
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def main():
    w, h, bpp, rows = decode(sys.argv[1])
    colours, nonwhite = set(), 0
    for line in rows[::4]:
        for x in range(0, len(line), bpp * 4):
            px = tuple(line[x:x + 3])
            colours.add(px)
            nonwhite += px != (255, 255, 255)
    sampled = len(rows[::4]) * len(range(0, w * bpp, bpp * 4))
    print(w, h, "%.4f" % (nonwhite / sampled), len(colours))


if __name__ == "__main__":
    main()
