/* A columnar decoder of XSpace protobuf bytes.
 *
 * Parsing a profile with the protobuf runtime builds one message object per event and then
 * needs a Python loop per event to reach columns; for profiles with millions of events that
 * is slow and several times the file size in memory. This decoder walks the wire format once
 * and fills flat arrays (events, lines, stats), which Python wraps as NumPy arrays without a
 * copy. The small parts (plane names, metadata maps, plane stats, hostnames) are handed back
 * as the raw bytes of those fields, for the protobuf runtime to parse.
 *
 * Field numbers are those of XProf's xplane.proto (see formats/xplane_proto.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---- growable arrays ------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t len;  /* in bytes */
    size_t cap;  /* in bytes */
} Buf;

static int
buf_reserve(Buf *b, size_t extra)
{
    if (b->len + extra <= b->cap) {
        return 0;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) {
        cap *= 2;
    }
    char *data = PyMem_RawRealloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int
buf_put(Buf *b, const void *src, size_t n)
{
    if (b->len + n > b->cap && buf_reserve(b, n) < 0) {
        return -1;
    }
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

#define PUT(b, type, value)            \
    do {                               \
        type v_ = (type)(value);       \
        if (buf_put((b), &v_, sizeof v_) < 0) \
            goto fail;                 \
    } while (0)

/* ---- an object that owns a Buf and exposes it through the buffer protocol -------------- */

typedef struct {
    PyObject_HEAD
    Buf buf;
} ColumnObject;

static void
Column_dealloc(ColumnObject *self)
{
    PyMem_RawFree(self->buf.data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Column_getbuffer(ColumnObject *self, Py_buffer *view, int flags)
{
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)self, self->buf.data ? self->buf.data : empty,
                             (Py_ssize_t)self->buf.len, 1, flags);
}

static PyBufferProcs Column_as_buffer = {(getbufferproc)Column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stepscope.formats._xspace_decode.Column",
    .tp_basicsize = sizeof(ColumnObject),
    .tp_dealloc = (destructor)Column_dealloc,
    .tp_as_buffer = &Column_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Decoded column bytes (read with numpy.frombuffer).",
};

/* Hand a Buf over to a new Column object (the Buf is emptied). */
static PyObject *
column_from(Buf *b)
{
    ColumnObject *col = PyObject_New(ColumnObject, &ColumnType);
    if (col == NULL) {
        return NULL;
    }
    col->buf = *b;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)col;
}

/* ---- wire format ----------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Reader;

static int
bad(const char *what)
{
    PyErr_Format(PyExc_ValueError, "malformed XSpace data: %s", what);
    return -1;
}

static inline int
read_varint(Reader *r, uint64_t *out)
{
    uint64_t v = 0;
    int shift = 0;
    while (r->p < r->end) {
        uint8_t byte = *r->p++;
        v |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = v;
            return 0;
        }
        shift += 7;
        if (shift >= 70) {
            return bad("varint too long");
        }
    }
    return bad("truncated varint");
}

/* Read a field key; returns 0 at the end of the message, 1 with a key, -1 on error. */
static inline int
read_key(Reader *r, uint32_t *field, uint32_t *wire)
{
    if (r->p >= r->end) {
        return 0;
    }
    uint64_t key;
    if (read_varint(r, &key) < 0) {
        return -1;
    }
    *field = (uint32_t)(key >> 3);
    *wire = (uint32_t)(key & 7);
    return 1;
}

static inline int
read_len(Reader *r, Reader *sub)
{
    uint64_t n;
    if (read_varint(r, &n) < 0) {
        return -1;
    }
    if (n > (uint64_t)(r->end - r->p)) {
        return bad("length past the end of the data");
    }
    sub->p = r->p;
    sub->end = r->p + n;
    r->p += n;
    return 0;
}

static int
skip_field(Reader *r, uint32_t wire)
{
    uint64_t v;
    Reader sub;
    switch (wire) {
    case 0:
        return read_varint(r, &v);
    case 1:
        if (r->end - r->p < 8) {
            return bad("truncated fixed64");
        }
        r->p += 8;
        return 0;
    case 2:
        return read_len(r, &sub);
    case 5:
        if (r->end - r->p < 4) {
            return bad("truncated fixed32");
        }
        r->p += 4;
        return 0;
    default:
        return bad("unsupported wire type");
    }
}

/* Copy one field (its key re-encoded, then its payload) to `out`, for protobuf to parse. */
static int
copy_field(Reader *r, uint32_t field, uint32_t wire, Buf *out)
{
    const uint8_t *start = r->p;
    uint8_t key[10];
    size_t n = 0;
    uint64_t k = ((uint64_t)field << 3) | wire;
    do {
        key[n++] = (uint8_t)((k & 0x7F) | (k > 0x7F ? 0x80 : 0));
        k >>= 7;
    } while (k);
    if (skip_field(r, wire) < 0) {
        return -1;
    }
    if (buf_put(out, key, n) < 0 || buf_put(out, start, (size_t)(r->p - start)) < 0) {
        return -1;
    }
    return 0;
}

/* ---- decoding -------------------------------------------------------------------------- */

enum { KIND_DOUBLE = 1, KIND_UINT64 = 2, KIND_INT64 = 3, KIND_STR = 4, KIND_BYTES = 5,
       KIND_REF = 6 };

typedef struct {
    /* events */
    Buf ev_line;        /* int32: index into the lines columns */
    Buf ev_metadata;    /* int64: XEvent.metadata_id */
    Buf ev_offset_ps;   /* int64 */
    Buf ev_duration_ps; /* int64 */
    Buf ev_nstats;      /* int32: number of stats of the event */
    Buf ev_occurrences; /* int64 pairs (event index, num_occurrences), rare */
    /* lines */
    Buf ln_plane;       /* int32: index into the planes list */
    Buf ln_id, ln_display_id, ln_timestamp_ns, ln_duration_ps; /* int64 */
    /* stats of events */
    Buf st_metadata;    /* int64 */
    Buf st_kind;        /* int8 */
    Buf st_value;       /* int64: value (double as its bits), or offset into blob */
    Buf st_len;         /* int32: length in blob for str/bytes, else 0 */
    Buf blob;           /* bytes of str/bytes stat values */
    PyObject *line_names, *line_display_names; /* lists of str */
    PyObject *planes;   /* list of bytes: each plane's fields except its lines */
    int64_t n_events;
} State;

static int
decode_stat(State *s, Reader *r)
{
    uint32_t field, wire;
    int64_t metadata_id = 0, value = 0;
    int8_t kind = 0;
    int32_t len = 0;
    int more;
    while ((more = read_key(r, &field, &wire)) == 1) {
        uint64_t v;
        if (field == 1 && wire == 0) {
            if (read_varint(r, &v) < 0) return -1;
            metadata_id = (int64_t)v;
        } else if (field == 2 && wire == 1) {
            if (r->end - r->p < 8) return bad("truncated double");
            memcpy(&value, r->p, 8);
            r->p += 8;
            kind = KIND_DOUBLE;
        } else if ((field == 3 || field == 4 || field == 7) && wire == 0) {
            if (read_varint(r, &v) < 0) return -1;
            value = (int64_t)v;
            kind = field == 3 ? KIND_UINT64 : field == 4 ? KIND_INT64 : KIND_REF;
        } else if ((field == 5 || field == 6) && wire == 2) {
            Reader sub;
            if (read_len(r, &sub) < 0) return -1;
            value = (int64_t)s->blob.len;
            len = (int32_t)(sub.end - sub.p);
            if (buf_put(&s->blob, sub.p, (size_t)len) < 0) return -1;
            kind = field == 5 ? KIND_STR : KIND_BYTES;
        } else if (skip_field(r, wire) < 0) {
            return -1;
        }
    }
    if (more < 0) return -1;
    PUT(&s->st_metadata, int64_t, metadata_id);
    PUT(&s->st_kind, int8_t, kind);
    PUT(&s->st_value, int64_t, value);
    PUT(&s->st_len, int32_t, len);
    return 0;
fail:
    return -1;
}

static int
decode_event(State *s, Reader *r, int32_t line_index)
{
    uint32_t field, wire;
    int64_t metadata_id = 0, offset = 0, duration = 0, occurrences = 0;
    int32_t nstats = 0;
    int more;
    while ((more = read_key(r, &field, &wire)) == 1) {
        uint64_t v;
        if (wire == 0 && (field == 1 || field == 2 || field == 3 || field == 5)) {
            if (read_varint(r, &v) < 0) return -1;
            if (field == 1) metadata_id = (int64_t)v;
            else if (field == 2) offset = (int64_t)v;
            else if (field == 3) duration = (int64_t)v;
            else occurrences = (int64_t)v;
        } else if (field == 4 && wire == 2) {
            Reader sub;
            if (read_len(r, &sub) < 0 || decode_stat(s, &sub) < 0) return -1;
            nstats++;
        } else if (skip_field(r, wire) < 0) {
            return -1;
        }
    }
    if (more < 0) return -1;
    PUT(&s->ev_line, int32_t, line_index);
    PUT(&s->ev_metadata, int64_t, metadata_id);
    PUT(&s->ev_offset_ps, int64_t, offset);
    PUT(&s->ev_duration_ps, int64_t, duration);
    PUT(&s->ev_nstats, int32_t, nstats);
    if (occurrences) {
        PUT(&s->ev_occurrences, int64_t, s->n_events);
        PUT(&s->ev_occurrences, int64_t, occurrences);
    }
    s->n_events++;
    return 0;
fail:
    return -1;
}

static int
append_str(PyObject *list, Reader *sub)
{
    PyObject *str = PyUnicode_DecodeUTF8((const char *)sub->p, sub->end - sub->p, "replace");
    if (str == NULL) return -1;
    int rc = PyList_Append(list, str);
    Py_DECREF(str);
    return rc;
}

static int
decode_line(State *s, Reader *r, int32_t plane_index)
{
    uint32_t field, wire;
    int64_t id = 0, display_id = 0, timestamp = 0, duration = 0;
    Reader name = {NULL, NULL}, display_name = {NULL, NULL};
    int32_t line_index = (int32_t)(s->ln_plane.len / sizeof(int32_t));
    int more;
    while ((more = read_key(r, &field, &wire)) == 1) {
        uint64_t v;
        if (wire == 0 && (field == 1 || field == 10 || field == 3 || field == 9)) {
            if (read_varint(r, &v) < 0) return -1;
            if (field == 1) id = (int64_t)v;
            else if (field == 10) display_id = (int64_t)v;
            else if (field == 3) timestamp = (int64_t)v;
            else duration = (int64_t)v;
        } else if (wire == 2 && field == 2) {
            if (read_len(r, &name) < 0) return -1;
        } else if (wire == 2 && field == 11) {
            if (read_len(r, &display_name) < 0) return -1;
        } else if (wire == 2 && field == 4) {
            Reader sub;
            if (read_len(r, &sub) < 0 || decode_event(s, &sub, line_index) < 0) return -1;
        } else if (skip_field(r, wire) < 0) {
            return -1;
        }
    }
    if (more < 0) return -1;
    PUT(&s->ln_plane, int32_t, plane_index);
    PUT(&s->ln_id, int64_t, id);
    PUT(&s->ln_display_id, int64_t, display_id);
    PUT(&s->ln_timestamp_ns, int64_t, timestamp);
    PUT(&s->ln_duration_ps, int64_t, duration);
    Reader none = {(const uint8_t *)"", (const uint8_t *)""};
    if (append_str(s->line_names, name.p ? &name : &none) < 0) return -1;
    if (append_str(s->line_display_names, display_name.p ? &display_name : &none) < 0)
        return -1;
    return 0;
fail:
    return -1;
}

static int
decode_plane(State *s, Reader *r, int32_t plane_index)
{
    /* Everything but the lines is copied, key and all, for the protobuf runtime to parse. */
    Buf rest = {NULL, 0, 0};
    uint32_t field, wire;
    int more;
    while ((more = read_key(r, &field, &wire)) == 1) {
        if (field == 3 && wire == 2) {
            Reader sub;
            if (read_len(r, &sub) < 0 || decode_line(s, &sub, plane_index) < 0) goto fail;
        } else if (copy_field(r, field, wire, &rest) < 0) {
            goto fail;
        }
    }
    if (more < 0) goto fail;
    PyObject *bytes = PyBytes_FromStringAndSize(rest.data ? rest.data : "", rest.len);
    PyMem_RawFree(rest.data);
    if (bytes == NULL) return -1;
    int rc = PyList_Append(s->planes, bytes);
    Py_DECREF(bytes);
    return rc;
fail:
    PyMem_RawFree(rest.data);
    return -1;
}

static void
state_free(State *s)
{
    Buf *bufs[] = {&s->ev_line, &s->ev_metadata, &s->ev_offset_ps, &s->ev_duration_ps,
                   &s->ev_nstats, &s->ev_occurrences, &s->ln_plane, &s->ln_id,
                   &s->ln_display_id, &s->ln_timestamp_ns, &s->ln_duration_ps,
                   &s->st_metadata, &s->st_kind, &s->st_value, &s->st_len, &s->blob};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        PyMem_RawFree(bufs[i]->data);
        bufs[i]->data = NULL;
    }
    Py_XDECREF(s->line_names);
    Py_XDECREF(s->line_display_names);
    Py_XDECREF(s->planes);
}

static int
add_column(PyObject *dict, const char *name, Buf *b)
{
    PyObject *col = column_from(b);
    if (col == NULL) return -1;
    int rc = PyDict_SetItemString(dict, name, col);
    Py_DECREF(col);
    return rc;
}

static PyObject *
decode(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    State s;
    memset(&s, 0, sizeof s);
    Buf space_rest = {NULL, 0, 0};
    PyObject *result = NULL;
    s.line_names = PyList_New(0);
    s.line_display_names = PyList_New(0);
    s.planes = PyList_New(0);
    if (s.line_names == NULL || s.line_display_names == NULL || s.planes == NULL) goto done;

    Reader r = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len};
    uint32_t field, wire;
    int more;
    int32_t plane_index = 0;
    while ((more = read_key(&r, &field, &wire)) == 1) {
        if (field == 1 && wire == 2) {
            Reader sub;
            if (read_len(&r, &sub) < 0 || decode_plane(&s, &sub, plane_index++) < 0) goto done;
        } else if (copy_field(&r, field, wire, &space_rest) < 0) {
            goto done;
        }
    }
    if (more < 0) goto done;

    PyObject *out = PyDict_New();
    if (out == NULL) goto done;
    PyObject *rest = PyBytes_FromStringAndSize(space_rest.data ? space_rest.data : "",
                                               space_rest.len);
    if (rest == NULL || PyDict_SetItemString(out, "space_rest", rest) < 0 ||
        PyDict_SetItemString(out, "planes", s.planes) < 0 ||
        PyDict_SetItemString(out, "line_name", s.line_names) < 0 ||
        PyDict_SetItemString(out, "line_display_name", s.line_display_names) < 0 ||
        add_column(out, "ev_line", &s.ev_line) < 0 ||
        add_column(out, "ev_metadata", &s.ev_metadata) < 0 ||
        add_column(out, "ev_offset_ps", &s.ev_offset_ps) < 0 ||
        add_column(out, "ev_duration_ps", &s.ev_duration_ps) < 0 ||
        add_column(out, "ev_nstats", &s.ev_nstats) < 0 ||
        add_column(out, "ev_occurrences", &s.ev_occurrences) < 0 ||
        add_column(out, "ln_plane", &s.ln_plane) < 0 ||
        add_column(out, "ln_id", &s.ln_id) < 0 ||
        add_column(out, "ln_display_id", &s.ln_display_id) < 0 ||
        add_column(out, "ln_timestamp_ns", &s.ln_timestamp_ns) < 0 ||
        add_column(out, "ln_duration_ps", &s.ln_duration_ps) < 0 ||
        add_column(out, "st_metadata", &s.st_metadata) < 0 ||
        add_column(out, "st_kind", &s.st_kind) < 0 ||
        add_column(out, "st_value", &s.st_value) < 0 ||
        add_column(out, "st_len", &s.st_len) < 0 ||
        add_column(out, "blob", &s.blob) < 0) {
        Py_XDECREF(rest);
        Py_DECREF(out);
        goto done;
    }
    Py_DECREF(rest);
    result = out;
done:
    PyMem_RawFree(space_rest.data);
    state_free(&s);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef module_methods[] = {
    {"decode", decode, METH_O,
     "Decode XSpace bytes into flat columns (see formats/xspace_columns.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_xspace_decode", "Columnar XSpace decoder.", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__xspace_decode(void)
{
    if (PyType_Ready(&ColumnType) < 0) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
