/* Protobuf wire-format pieces shared by the C writers of XEvent bytes (formats/_xplane_encode.c
 * from columns, capture/records_xplane.c from capture records): the XStat value fields' numbers
 * (XProf's xplane.proto) and base-128 varints. */
#ifndef STEPSCOPE_PROTOBUF_WIRE_H
#define STEPSCOPE_PROTOBUF_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* XStat's value fields. */
enum { DOUBLE_VALUE = 2, UINT64_VALUE = 3, INT64_VALUE = 4, STR_VALUE = 5, BYTES_VALUE = 6 };

/* The bytes the varint of `v` takes. */
static inline size_t
varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Writes the varint of `v` at `out`; returns the byte after it. */
static inline char *
put_varint(char *out, uint64_t v)
{
    while (v >= 0x80) {
        *out++ = (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *out++ = (char)v;
    return out;
}

#endif
