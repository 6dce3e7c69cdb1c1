/* The XEvents of a plane's lines, from columns, as protobuf wire bytes.
 *
 * The compiled twin of xplane_encoder.py's NumPy encoder (same bytes): one pass sizes each
 * line's `events` fields, a second writes them. Field numbers are those of XProf's
 * xplane.proto (see formats/xplane_proto.py and xplane_encoder.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "protobuf_wire.h"

typedef struct {
    Py_buffer view;
    Py_ssize_t n;
} Column;

/* A contiguous column of `itemsize`-byte items (int64 or int8), read-only. */
static int
get_column(PyObject *obj, Py_ssize_t itemsize, Column *col, const char *what)
{
    if (PyObject_GetBuffer(obj, &col->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return -1;
    }
    if (col->view.itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s must hold %zd-byte integers", what, itemsize);
        PyBuffer_Release(&col->view);
        col->view.obj = NULL;
        return -1;
    }
    col->n = col->view.len / itemsize;
    return 0;
}

/* Sizes of one stat's XStat message and of its value's varint (or the blob's length). */
static inline size_t
stat_size(int64_t md, int8_t field, int64_t value, const int64_t *blob_begin, int64_t nblobs,
          int *ok)
{
    size_t size = 1 + varint_size((uint64_t)md) + 1;
    if (field == DOUBLE_VALUE) {
        return size + 8;
    }
    if (field == STR_VALUE || field == BYTES_VALUE) {
        if (value < 0 || value >= nblobs) {
            *ok = 0;
            return 0;
        }
        uint64_t len = (uint64_t)(blob_begin[value + 1] - blob_begin[value]);
        return size + varint_size(len) + len;
    }
    return size + varint_size((uint64_t)value);
}

static PyObject *
encode_events(PyObject *module, PyObject *args)
{
    PyObject *objs[10];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOO:encode_events", &objs[0], &objs[1], &objs[2],
                          &objs[3], &objs[4], &objs[5], &objs[6], &objs[7], &objs[8],
                          &objs[9])) {
        return NULL;
    }
    static const char *names[10] = {"metadata_id", "offset_ps", "duration_ps", "nstats",
                                    "stat_metadata_id", "stat_field", "stat_value",
                                    "blob_begin", "blobs", "line_begin"};
    static const Py_ssize_t sizes[10] = {8, 8, 8, 4, 8, 1, 8, 8, 1, 8};
    Column cols[10];
    int got = 0;
    PyObject *result = NULL;
    for (; got < 10; got++) {
        if (get_column(objs[got], sizes[got], &cols[got], names[got]) < 0) {
            goto done;
        }
    }
    const int64_t *mid = cols[0].view.buf, *off = cols[1].view.buf, *dur = cols[2].view.buf;
    const int32_t *nstats = cols[3].view.buf;
    const int64_t *smid = cols[4].view.buf;
    const int8_t *sfield = cols[5].view.buf;
    const int64_t *svalue = cols[6].view.buf, *blob_begin = cols[7].view.buf;
    const char *blobs = cols[8].view.buf;
    const int64_t *line_begin = cols[9].view.buf;
    Py_ssize_t n = cols[0].n, nstat_rows = cols[4].n, nlines = cols[9].n - 1;
    int64_t nblobs = cols[7].n - 1;
    if (cols[1].n != n || cols[2].n != n || cols[3].n != n || cols[5].n != nstat_rows ||
        cols[6].n != nstat_rows || nlines < 0 || nblobs < 0 ||
        (nlines > 0 && (line_begin[0] != 0 || line_begin[nlines] != n))) {
        PyErr_SetString(PyExc_ValueError, "encode_events: columns of different lengths");
        goto done;
    }
    for (int64_t b = 0; b < nblobs; b++) {
        if (blob_begin[b] < 0 || blob_begin[b] > blob_begin[b + 1] ||
            blob_begin[b + 1] > cols[8].n) {
            PyErr_SetString(PyExc_ValueError, "encode_events: bad blob offsets");
            goto done;
        }
    }
    result = PyList_New(nlines);
    if (result == NULL) {
        goto done;
    }
    Py_ssize_t stat_row = 0;
    for (Py_ssize_t line = 0; line < nlines; line++) {
        Py_ssize_t lo = (Py_ssize_t)line_begin[line], hi = (Py_ssize_t)line_begin[line + 1];
        if (lo > hi) {
            PyErr_SetString(PyExc_ValueError, "encode_events: bad line bounds");
            Py_CLEAR(result);
            goto done;
        }
        /* Pass 1: the size of this line's events fields. */
        size_t total = 0;
        Py_ssize_t row = stat_row;
        int ok = 1;
        for (Py_ssize_t i = lo; i < hi; i++) {
            if (nstats[i] < 0 || row + nstats[i] > nstat_rows) {
                ok = 0;
                break;
            }
            size_t body = (mid[i] != 0 ? 1 + varint_size((uint64_t)mid[i]) : 0) +
                          1 + varint_size((uint64_t)off[i]) +
                          (dur[i] != 0 ? 1 + varint_size((uint64_t)dur[i]) : 0);
            for (int32_t s = 0; s < nstats[i]; s++, row++) {
                size_t st = stat_size(smid[row], sfield[row], svalue[row], blob_begin, nblobs,
                                      &ok);
                body += 1 + varint_size(st) + st;
            }
            total += 1 + varint_size(body) + body;
        }
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "encode_events: bad stat rows");
            Py_CLEAR(result);
            goto done;
        }
        PyObject *bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
        if (bytes == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, line, bytes);
        /* Pass 2: write them. */
        char *out = PyBytes_AS_STRING(bytes);
        row = stat_row;
        for (Py_ssize_t i = lo; i < hi; i++) {
            size_t body = (mid[i] != 0 ? 1 + varint_size((uint64_t)mid[i]) : 0) +
                          1 + varint_size((uint64_t)off[i]) +
                          (dur[i] != 0 ? 1 + varint_size((uint64_t)dur[i]) : 0);
            for (int32_t s = 0; s < nstats[i]; s++) {
                size_t st = stat_size(smid[row + s], sfield[row + s], svalue[row + s],
                                      blob_begin, nblobs, &ok);
                body += 1 + varint_size(st) + st;
            }
            *out++ = (4 << 3) | 2; /* XLine.events */
            out = put_varint(out, body);
            if (mid[i] != 0) {
                *out++ = (1 << 3) | 0; /* metadata_id */
                out = put_varint(out, (uint64_t)mid[i]);
            }
            *out++ = (2 << 3) | 0; /* offset_ps: in a oneof, written even when 0 */
            out = put_varint(out, (uint64_t)off[i]);
            if (dur[i] != 0) {
                *out++ = (3 << 3) | 0; /* duration_ps */
                out = put_varint(out, (uint64_t)dur[i]);
            }
            for (int32_t s = 0; s < nstats[i]; s++, row++) {
                int8_t field = sfield[row];
                int64_t value = svalue[row];
                size_t st = stat_size(smid[row], field, value, blob_begin, nblobs, &ok);
                *out++ = (4 << 3) | 2; /* XEvent.stats */
                out = put_varint(out, st);
                *out++ = (1 << 3) | 0; /* XStat.metadata_id */
                out = put_varint(out, (uint64_t)smid[row]);
                if (field == DOUBLE_VALUE) {
                    *out++ = (char)((field << 3) | 1);
                    uint64_t bits = (uint64_t)value;
                    for (int k = 0; k < 8; k++) {
                        *out++ = (char)(bits >> (8 * k));
                    }
                } else if (field == STR_VALUE || field == BYTES_VALUE) {
                    int64_t len = blob_begin[value + 1] - blob_begin[value];
                    *out++ = (char)((field << 3) | 2);
                    out = put_varint(out, (uint64_t)len);
                    memcpy(out, blobs + blob_begin[value], (size_t)len);
                    out += len;
                } else {
                    *out++ = (char)((field << 3) | 0);
                    out = put_varint(out, (uint64_t)value);
                }
            }
        }
        stat_row = row;
    }
done:
    for (int i = 0; i < got; i++) {
        PyBuffer_Release(&cols[i].view);
    }
    return result;
}

static PyMethodDef module_methods[] = {
    {"encode_events", encode_events, METH_VARARGS,
     "encode_events(metadata_id, offset_ps, duration_ps, nstats (int32), stat_metadata_id, "
     "stat_field, stat_value, blob_begin, blobs, line_begin) -> [bytes per line]: each "
     "line's XLine.events fields."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_xplane_encode",
    "XEvents from columns as protobuf wire bytes (xplane_encoder's compiled twin).", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__xplane_encode(void)
{
    return PyModule_Create(&module_def);
}
